"""GRPO on the tiny twin raises the mean count reward on held-out prompts: measured, from an SFT checkpoint.

    python benchmarks/grpo_reward.py [--sft-steps 100] [--grpo-steps 20] [--seeds 0 1] [--eval-prompts 100]
                                     [--out benchmarks/results/grpo_reward_cpu2_<date>.json]

1. SFT: the demo's setup (recipes/demo_counting.yaml: tiny Qwen2-VL, random init, full fine-tuning on
   synthetic:counting) for --sft-steps, then `mmtune export` of its last checkpoint.
2. GRPO: train.objective=grpo from the exported SFT model on the same synthetic:counting train split (full
   fine-tuning), rewards `count` (1 / (1 + |error|), the MAE's reward) plus a small `format` reward (the
   answer is a number), --grpo-steps, once per --seeds value (train.seed: the sampling and the data order).
3. Measured on --eval-prompts held-out prompts (the eval split, whose image layouts the train split never
   has) before and after, with the run's own prompt encoder, collator, sampler and reward code:
   - `sampled`: the mean count reward of G completions per prompt sampled at the training temperature
     (what GRPO maximises), with the share of parsable answers;
     and the mean reward over the parsable ones (counting better, not only answering more often);
   - `greedy`: the mean count reward, exact match and MAE of the greedy answer (what `mmtune eval` reports),
     and how many distinct greedy answers the prompts get (1: one number for every image).
   The measurement's own sampling is seeded identically before and after (the change is the model's).

The results file carries the provenance of benchmarks/_provenance.py (commit, command, versions, machine, load).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "src"))  # measure this checkout's mmtune (the provenance commit), not an installed one

from _provenance import provenance, write_results  # noqa: E402

RESULT_KEYS = ("benchmark", "settings", "sft_s", "runs", "summary", "decisions")
TRAIN_KEYS = ("loss", "reward", "reward_std", "reward/count", "reward/count_std", "reward/format", "completion_length",
              "clip_ratio", "grad_norm")


def measure(run, records, batch: int = 25, seed: int = 1234) -> dict:
    """The count reward of the run's model on `records`' prompts: sampled (G per prompt, the run's temperature)
    and greedy (with exact match and MAE), no_grad, eval mode."""
    import torch

    from mmtune.data.prompts import REFS, references
    from mmtune.evaluate.metrics import parse_number
    from mmtune.evaluate.rewards import reward_function
    from mmtune.loss import model_inputs, to_device

    count = reward_function("count")
    obj = run.objective
    model = run.unwrapped_model()
    was = model.training
    model.eval()
    sampled, parsable, greedy, exact, errors, answers = [], [], [], [], [], []
    torch.manual_seed(seed)  # the measurement's sampling is the same before and after: only the model differs
    with torch.no_grad():
        for i in range(0, len(records), batch):
            items = [run.train_encoder.encode(r) for r in records[i:i + batch]]
            mb = to_device(run.train_collator(items), run.accelerator.device)
            refs = references(mb)
            prompt = {k: v for k, v in model_inputs(mb).items() if k != REFS}
            for c in obj._sample(model, prompt):
                texts = run.objective.tok.batch_decode(c * obj._mask(c) + obj.pad * (1 - obj._mask(c)),
                                                       skip_special_tokens=True)
                sampled += count(texts, refs)
                parsable += [parse_number(t) is not None for t in texts]
            out = model.generate(**prompt, do_sample=False, max_new_tokens=obj.cfg.max_completion_length,
                                 pad_token_id=obj.pad, eos_token_id=obj.eos or None)[:, prompt["input_ids"].shape[1]:]
            texts = obj.tok.batch_decode(out * obj._mask(out) + obj.pad * (1 - obj._mask(out)), skip_special_tokens=True)
            greedy += count(texts, refs)
            answers += [t.strip() for t in texts]
            for t, r in zip(texts, refs):
                got, want = parse_number(t), parse_number(r[0])
                exact.append(got is not None and got == want)
                errors.append(abs(got - want) if got is not None else None)
    model.train(was)
    known = [e for e in errors if e is not None]
    answered = [r for r, ok in zip(sampled, parsable) if ok]
    # A gain in the mean can come from answering with a number more often (the parsable share) or from counting
    # better when answering (the mean over parsable answers); a greedy model that says one number for every
    # image has 1 distinct answer.
    return {"prompts": len(records), "sampled_count_reward": round(statistics.fmean(sampled), 4),
            "sampled_parsable": round(statistics.fmean(parsable), 4),
            "sampled_count_reward_when_parsable": round(statistics.fmean(answered), 4) if answered else None,
            "greedy_distinct_answers": len(set(answers)),
            "greedy_count_reward": round(statistics.fmean(greedy), 4),
            "greedy_exact_match": round(statistics.fmean(exact), 4),
            "greedy_mae": round(statistics.fmean(known), 4) if known else None,
            "greedy_unparsable": len(errors) - len(known)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sft-steps", type=int, default=100)
    ap.add_argument("--grpo-steps", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--train-size", type=int, default=1200)
    ap.add_argument("--eval-prompts", type=int, default=100)
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--beta", type=float, default=0.0)
    ap.add_argument("--grpo-lr", type=float, default=2e-4)
    ap.add_argument("--work", default="/tmp/mmtune_grpo_bench")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    started = provenance()
    import torch

    torch.set_num_threads(2)
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.data.synthetic import make_counting
    from mmtune.export import export
    from mmtune.train.loop import train

    work = Path(args.work)
    result = {"benchmark": "grpo_reward", "settings": vars(args), "runs": []}
    t0 = time.perf_counter()
    sft = load_config(ROOT / "recipes" / "demo_counting.yaml", [
        f"output_dir={work / 'sft'}", f"train.max_steps={args.sft_steps}", "data.eval=null", "eval.every=null",
        "train.save_every=null", "logging.tensorboard=false", f"data.synthetic_train_size={args.train_size}",
        "eval.best_metric=eval_loss", "eval.metrics=[exact_match]"])
    train(build_run(sft))
    folder = export(work / "sft", out=work / "sft_model")
    result["sft_s"] = round(time.perf_counter() - t0, 1)
    held_out = make_counting(args.eval_prompts, 0, "eval", train_size=args.train_size)

    for seed in args.seeds:
        out_dir = work / f"grpo_seed{seed}"
        cfg = load_config(None, [
            f"model.name={folder}", "model.gradient_checkpointing=false", "data.train=synthetic:counting",
            f"data.synthetic_train_size={args.train_size}", "data.max_length=256", "adapter.method=full",
            "train.objective=grpo", f"train.grpo.generations={args.generations}",
            "train.grpo.max_completion_length=4", f"train.grpo.temperature={args.temperature}",
            f"train.grpo.beta={args.beta}",
            "train.grpo.rewards=[{name: count, weight: 1.0}, {name: format, weight: 0.1, pattern: '\\d+'}]",
            f"train.max_steps={args.grpo_steps}", f"train.micro_batch_size={args.prompts_per_step}",
            f"train.lr={args.grpo_lr}", "train.warmup_steps=0", "train.scheduler=constant", "train.precision=fp32",
            "train.device=cpu", f"train.seed={seed}", "train.save_every=null", "train.resume=false",
            "logging.tensorboard=false", f"output_dir={out_dir}"])
        run = build_run(cfg)
        entry = {"seed": seed, "before": measure(run, held_out)}
        t1 = time.perf_counter()
        summary = train(run)
        entry["grpo_s"] = round(time.perf_counter() - t1, 1)
        entry["after"] = measure(run, held_out)
        rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
        rows = [r for r in rows if r["kind"] == "train"]
        half = max(1, len(rows) // 4)

        def avg(rs, k):
            return round(statistics.fmean(r[k] for r in rs), 4) if all(k in r for r in rs) else None

        entry["train_log"] = {"first_quarter": {k: avg(rows[:half], k) for k in TRAIN_KEYS},
                              "last_quarter": {k: avg(rows[-half:], k) for k in TRAIN_KEYS}}
        result["runs"].append(entry)
        result["decisions"] = [d for d in summary["decisions"] if d.startswith(("train.objective", "reference model"))]
        b, a = entry["before"], entry["after"]
        print(f"seed {seed}: sampled count reward {b['sampled_count_reward']:.3f} -> {a['sampled_count_reward']:.3f}, "
              f"greedy {b['greedy_count_reward']:.3f} -> {a['greedy_count_reward']:.3f} "
              f"(EM {b['greedy_exact_match']:.3f} -> {a['greedy_exact_match']:.3f})", flush=True)

    gains = {k: [r["after"][k] - r["before"][k] for r in result["runs"]]
             for k in ("sampled_count_reward", "greedy_count_reward", "greedy_exact_match")}
    result["summary"] = {k: {"mean_gain": round(statistics.fmean(v), 4), "min_gain": round(min(v), 4),
                             "max_gain": round(max(v), 4), "seeds_improved": sum(x > 0 for x in v)}
                         for k, v in gains.items()}
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / \
        f"grpo_reward_cpu{os.cpu_count()}_{time.strftime('%Y%m%d', time.gmtime())}.json"
    write_results(out, result, started)
    print(json.dumps(result["summary"], indent=1), f"(results: {out})")
    return result


if __name__ == "__main__":
    main()
