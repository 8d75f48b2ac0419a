"""DPO on the tiny twin raises preference accuracy on held-out pairs: measured, from an SFT checkpoint.

    python benchmarks/dpo_preference.py [--sft-steps 150] [--dpo-steps 60] [--pairs 480] [--eval-pairs 120]
                                        [--out benchmarks/results/dpo_preference_cpu2_<date>.json]

1. SFT: the demo's setup (recipes/demo_counting.yaml: tiny Qwen2-VL, random init, full fine-tuning on
   synthetic:counting) for --sft-steps, then `mmtune export` of its last checkpoint.
2. Pairs (RLAIF-V's columns, data.format=preference): synthetic counting images, the chosen answer the true
   count, the rejected one another count (1-6). Training pairs come from the train split, held-out pairs from
   the eval split (disjoint layouts, as the demo's splits are), written as PNG + JSONL.
3. DPO: train.objective=dpo from the exported SFT model (full fine-tuning: the reference is the frozen copy
   of the SFT weights), --dpo-steps.
4. Measured on the held-out pairs before and after DPO, with the run's own encoder, collator and
   objective code: preference accuracy (the model gives the chosen answer the higher log-probability), the
   mean log-probability margin chosen - rejected, and after DPO the reward accuracy and margin against the
   reference (TRL's rewards/accuracies on an eval set).

The results file carries the provenance of benchmarks/_provenance.py (commit, command, versions, machine, load).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "src"))  # measure this checkout's mmtune (the provenance commit), not an installed one

from _provenance import provenance, write_results  # noqa: E402

RESULT_KEYS = ("benchmark", "settings", "sft_s", "before", "before_train_pairs", "dpo_s", "after", "after_train_pairs",
               "dpo_train_log", "decisions")


def write_pairs(folder: Path, split: str, n: int, train_size: int, seed: int = 0) -> Path:
    from mmtune.data.synthetic import make_counting

    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1000 + (split == "eval"))
    rows = []
    for i, rec in enumerate(make_counting(n, seed, split, train_size=train_size)):
        img = next(p["image"] for p in rec.messages[0]["content"] if p["type"] == "image")
        name = f"{split}_{i:04d}.png"
        img.save(folder / name)
        question = next(p["text"] for p in rec.messages[0]["content"] if p["type"] == "text")
        k = int(rec.references[0])
        wrong = rng.choice([c for c in range(1, 7) if c != k])
        rows.append({"idx": rec.id, "image": name, "question": question, "chosen": str(k), "rejected": str(wrong)})
    path = folder / f"{split}_pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def held_out(run, path: Path, batch: int = 20, limit: int | None = None) -> dict:
    """Preference accuracy and margins of the run's model on the (first `limit`) pairs of `path` (no_grad,
    eval mode)."""
    import torch

    from mmtune.data.sources import load_records
    from mmtune.loss import to_device
    from mmtune.objectives.dpo import pair_inputs, sequence_logps

    records = load_records(str(path), run.cfg.data, split="train").records[:limit]
    model = run.unwrapped_model()
    ref = run.objective.reference
    was = model.training
    model.eval()
    right = rew_right = 0
    margins, reward_margins = [], []
    with torch.no_grad():
        for i in range(0, len(records), batch):
            items = [run.train_encoder.encode(r) for r in records[i:i + batch]]
            mb = to_device(run.train_collator(items), run.accelerator.device)
            inputs = pair_inputs(mb)
            logps = sequence_logps(model, inputs, mb["labels"])
            with ref.active(model) as rm:
                ref_logps = sequence_logps(rm, inputs, mb["labels"])
            c, r = logps.chunk(2)
            rc, rr = ref_logps.chunk(2)
            right += int((c > r).sum())
            margins += (c - r).tolist()
            d = (c - rc) - (r - rr)
            rew_right += int((d > 0).sum())
            reward_margins += (run.cfg.train.dpo.beta * d).tolist()
    model.train(was)
    n = len(records)
    return {"pairs": n, "preference_accuracy": right / n, "logp_margin_mean": sum(margins) / n,
            "reward_accuracy": rew_right / n, "reward_margin_mean": sum(reward_margins) / n}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sft-steps", type=int, default=150)
    ap.add_argument("--dpo-steps", type=int, default=60)
    ap.add_argument("--pairs", type=int, default=480)
    ap.add_argument("--eval-pairs", type=int, default=120)
    ap.add_argument("--train-measure", type=int, default=200, help="training pairs measured before/after (the first N)")
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--dpo-lr", type=float, default=1e-4)
    ap.add_argument("--work", default="/tmp/mmtune_dpo_bench")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    started = provenance()
    import torch

    torch.set_num_threads(2)
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.export import export
    from mmtune.train.loop import train

    work = Path(args.work)
    result = {"benchmark": "dpo_preference", "settings": vars(args)}
    t0 = time.perf_counter()
    sft = load_config(ROOT / "recipes" / "demo_counting.yaml", [
        f"output_dir={work / 'sft'}", f"train.max_steps={args.sft_steps}", "data.eval=null", "eval.every=null",
        "train.save_every=null", "logging.tensorboard=false", f"data.synthetic_train_size={args.pairs}",
        "eval.best_metric=eval_loss", "eval.metrics=[exact_match]"])
    train(build_run(sft))
    folder = export(work / "sft", out=work / "sft_model")
    result["sft_s"] = round(time.perf_counter() - t0, 1)

    data = work / "pairs"
    train_pairs = write_pairs(data, "train", args.pairs, args.pairs)
    eval_pairs = write_pairs(data, "eval", args.eval_pairs, args.pairs)
    dpo = load_config(None, [
        f"model.name={folder}", "model.gradient_checkpointing=false", f"data.train={train_pairs}",
        "data.format=preference", "data.max_length=256", "adapter.method=full", "train.objective=dpo",
        f"train.dpo.beta={args.beta}", f"train.max_steps={args.dpo_steps}", "train.micro_batch_size=8",
        f"train.lr={args.dpo_lr}", "train.warmup_steps=5", "train.precision=fp32", "train.device=cpu",
        "train.save_every=null", "train.resume=false", "logging.tensorboard=false", f"output_dir={work / 'dpo'}"])
    run = build_run(dpo)
    result["before"] = held_out(run, eval_pairs)
    result["before_train_pairs"] = held_out(run, train_pairs, limit=args.train_measure)
    t1 = time.perf_counter()
    summary = train(run)
    result["dpo_s"] = round(time.perf_counter() - t1, 1)
    result["after"] = held_out(run, eval_pairs)
    result["after_train_pairs"] = held_out(run, train_pairs, limit=args.train_measure)
    rows = [json.loads(line) for line in (work / "dpo" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["kind"] == "train"]
    keys = ("loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")
    result["dpo_train_log"] = {"first": {k: rows[0][k] for k in keys}, "last": {k: rows[-1][k] for k in keys}}
    result["decisions"] = [d for d in summary["decisions"] if d.startswith(("train.objective", "reference model"))]
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / \
        f"dpo_preference_cpu{os.cpu_count()}_{time.strftime('%Y%m%d', time.gmtime())}.json"
    write_results(out, result, started)
    b, a = result["before"], result["after"]
    print(f"held-out pairs ({b['pairs']}): preference accuracy {b['preference_accuracy']:.3f} -> "
          f"{a['preference_accuracy']:.3f}, log-prob margin {b['logp_margin_mean']:.3f} -> {a['logp_margin_mean']:.3f}; "
          f"reward accuracy after DPO {a['reward_accuracy']:.3f} (results: {out})")
    return result


if __name__ == "__main__":
    main()
