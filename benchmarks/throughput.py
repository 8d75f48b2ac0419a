"""mmtune's loop vs a plain transformers + peft loop (the seeds' way), same model, data and steps; with
--peers also HF `Trainer` + peft and TRL `SFTTrainer` on the same records, order, steps and effective batch.

    python benchmarks/throughput.py [--steps 30] [--model tiny/qwen2-vl] [--repeats 5] [--json]
        [--src OTHER/src]   # run "ours" from another checkout's code (a before/after comparison)
        [--peers --trl-python /tmp/packing-venv/bin/python]   # a venv with trl (--system-site-packages)

Each variant runs in its own process so peak memory is its own: CUDA max_memory_allocated on a GPU,
peak RSS on a CPU. Both process the same synthetic counting records in the same order with the same
micro-batch and accumulation; tokens/s counts non-pad input tokens over the timed steps (the first
step of each is a warm-up and is not timed). Variants run interleaved (ours, plain, ours, plain, ...)
with one thread each; the median of the repeats is reported with the spread (min-max), not the best.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _config(args):
    from mmtune.config import load_config

    ov = [f"model.name={args.model}", "model.gradient_checkpointing=false", "data.train=synthetic:counting",
          "data.eval=null", f"data.synthetic_train_size={args.steps * args.mbs * args.accum + 8}",
          "adapter.method=lora", "adapter.r=8", "adapter.dropout=0.0", f"train.max_steps={args.steps}",
          f"train.micro_batch_size={args.mbs}", f"train.grad_accum={args.accum}", "train.precision=fp32",
          "train.lr=1e-4", "train.warmup_steps=0", "train.scheduler=constant", "train.max_grad_norm=null",
          "logging.tensorboard=false", f"output_dir={args.out}/ours", "train.resume=false",
          f"train.num_workers={args.workers}"] + list(args.set or [])
    from pathlib import Path

    return load_config(Path(__file__).resolve().parents[1] / "recipes" / "demo_counting.yaml", ov)


def _peak() -> int:
    import resource

    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def run_ours(args) -> dict:
    from mmtune.build import build_run
    from mmtune.train.loop import train

    t0 = time.perf_counter()
    run = build_run(_config(args))
    build_s = time.perf_counter() - t0
    summary = train(run)
    rows = [json.loads(line) for line in open(f"{args.out}/ours/metrics.jsonl")]
    timed = [r for r in rows if r["kind"] == "train"][1:]
    tokens = sum(r["tokens_per_s"] * r["step_time_s"] for r in timed)
    secs = sum(r["step_time_s"] for r in timed)
    return {"tokens_per_s": tokens / secs, "peak_memory_bytes": _peak(), "final_loss": summary and rows[-1]["loss"],
            "data_wait_fraction": sum(r.get("data_wait_s", 0.0) for r in timed) / secs,
            "build_s": build_s}


def run_plain(args) -> dict:
    """What the seeds wrote: processor on the raw batch, model's own loss, loss/accum, backward, step."""
    import torch
    from peft import LoraConfig, get_peft_model

    from mmtune.data.batches import BatchStream
    from mmtune.data.sources import load_records
    from mmtune.models.tiny import build_tiny

    cfg = _config(args)
    torch.manual_seed(0)
    model, processor = build_tiny(args.model)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                             "gate_proj", "up_proj", "down_proj"])).to(device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    records = load_records("synthetic:counting", cfg.data, split="train").records
    stream = BatchStream(len(records), seed=0, micro_batch_size=args.mbs)
    tok = processor.tokenizer
    tokens, secs = 0, 0.0
    for step in range(args.steps):
        t0 = time.perf_counter()
        n_tok = 0
        for _ in range(args.accum):
            recs = [records[i] for i in stream.next()]
            texts, images = [], []
            for r in recs:
                msgs = [{"role": m["role"],
                         "content": [{"type": p["type"], **({"text": p["text"]} if p["type"] == "text" else {})}
                                     for p in m["content"]]} for m in r.messages]
                texts.append(processor.apply_chat_template(msgs, tokenize=False))
                images.extend(p["image"] for m in r.messages for p in m["content"] if p["type"] == "image")
            batch = processor(text=texts, images=images, padding=True, return_tensors="pt").to(device)
            labels = batch["input_ids"].clone()
            labels[labels == tok.pad_token_id] = -100
            loss = model(**batch, labels=labels).loss / args.accum
            loss.backward()
            n_tok += int(batch["attention_mask"].sum())
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step > 0:
            secs += time.perf_counter() - t0
            tokens += n_tok
    return {"tokens_per_s": tokens / secs, "peak_memory_bytes": _peak(), "final_loss": float(loss) * args.accum}


def _ordered_records(args, cfg) -> list:
    """The records of every micro-batch the steps use, in the order mmtune's loop and the plain loop draw them."""
    from mmtune.data.batches import BatchStream
    from mmtune.data.sources import load_records

    records = load_records("synthetic:counting", cfg.data, split="train").records
    stream = BatchStream(len(records), seed=0, micro_batch_size=args.mbs)
    return [records[i] for _ in range(args.steps * args.accum) for i in stream.next()]


def _lora_model(args):
    import torch
    from peft import LoraConfig, get_peft_model

    from mmtune.models.tiny import build_tiny

    torch.manual_seed(0)
    model, processor = build_tiny(args.model)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                             "gate_proj", "up_proj", "down_proj"]))
    return model, processor


class _StepClock:
    """A TrainerCallback's timing: wall time between consecutive step ends (so the data a step waits for is
    in its time, as in mmtune's step_time_s and the plain loop's), the first step untimed."""

    def __init__(self):
        self.ends: list[float] = []

    def callback(self):
        from transformers import TrainerCallback

        clock = self

        class Clock(TrainerCallback):
            def on_train_begin(self, *a, **k):
                clock.ends.append(time.perf_counter())

            def on_step_end(self, *a, **k):
                clock.ends.append(time.perf_counter())

        return Clock()


def _peer_result(args, clock, batch_tokens: list[int], trainer) -> dict:
    """tokens/s over steps 2..N: the non-pad tokens of their micro-batches over their wall time."""
    if len(clock.ends) != args.steps + 1 or len(batch_tokens) < args.steps * args.accum:
        raise RuntimeError(f"expected {args.steps} steps of {args.accum} micro-batches, saw {len(clock.ends) - 1} "
                           f"steps and {len(batch_tokens)} micro-batches")
    tokens = sum(batch_tokens[args.accum:args.steps * args.accum])
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"tokens_per_s": tokens / (clock.ends[-1] - clock.ends[1]), "peak_memory_bytes": _peak(),
            "final_loss": losses[-1] if losses else None}


def _trainer_args(args, cls, **extra):
    return cls(output_dir=f"{args.out}/{'trl' if 'SFT' in cls.__name__ else 'trainer'}",
               per_device_train_batch_size=args.mbs, gradient_accumulation_steps=args.accum, max_steps=args.steps,
               learning_rate=1e-4, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=0.0, weight_decay=0.0,
               logging_steps=args.steps, save_strategy="no", report_to=[], dataloader_num_workers=0,
               train_sampling_strategy="sequential", use_cpu=not _cuda(), seed=0,
               # fp32 without checkpointing, as the other variants (TRL's own defaults are bf16 + checkpointing)
               bf16=False, fp16=False, gradient_checkpointing=False, **extra)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def run_trainer(args) -> dict:
    """HF `Trainer` + peft, fed the plain loop's batches (the same records in the same order, the processor
    on the raw batch, labels = the non-pad ids), with the same micro-batch, accumulation, lr and steps."""
    from transformers import Trainer, TrainingArguments

    cfg = _config(args)
    model, processor = _lora_model(args)
    tok = processor.tokenizer
    batch_tokens: list[int] = []

    def collate(recs):
        texts, images = [], []
        for r in recs:
            msgs = [{"role": m["role"],
                     "content": [{"type": p["type"], **({"text": p["text"]} if p["type"] == "text" else {})}
                                 for p in m["content"]]} for m in r.messages]
            texts.append(processor.apply_chat_template(msgs, tokenize=False))
            images.extend(p["image"] for m in r.messages for p in m["content"] if p["type"] == "image")
        batch = dict(processor(text=texts, images=images, padding=True, return_tensors="pt"))
        labels = batch["input_ids"].clone()
        labels[labels == tok.pad_token_id] = -100
        batch["labels"] = labels
        batch_tokens.append(int(batch["attention_mask"].sum()))
        return batch

    clock = _StepClock()
    trainer = Trainer(model=model, args=_trainer_args(args, TrainingArguments, remove_unused_columns=False),
                      train_dataset=_ordered_records(args, cfg), data_collator=collate, callbacks=[clock.callback()])
    trainer.train()
    return _peer_result(args, clock, batch_tokens, trainer)


def run_trl(args) -> dict:
    """TRL `SFTTrainer` with matching settings: the same LoRA model, records (as TRL's own vision-language
    dataset rows: messages + images) in the same order, micro-batch, accumulation, lr and steps; TRL's own
    collator, padding and loss (every non-pad token, as the plain loop: the Qwen2-VL template has no
    generation markers for TRL's assistant-only loss). Needs trl (--trl-python: a venv that has it)."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    cfg = _config(args)
    model, processor = _lora_model(args)
    rows = []
    for r in _ordered_records(args, cfg):
        images = [p["image"] for m in r.messages for p in m["content"] if p["type"] == "image"]
        msgs = [{"role": m["role"], "content": [{"type": "image"} if p["type"] == "image" else
                                                 {"type": "text", "text": p["text"]} for p in m["content"]]}
                for m in r.messages]
        rows.append({"messages": msgs, "images": images})
    clock = _StepClock()
    trainer = SFTTrainer(model=model, processing_class=processor, train_dataset=Dataset.from_list(rows),
                         args=_trainer_args(args, SFTConfig, max_length=None, packing=False,
                                            assistant_only_loss=False),
                         callbacks=[clock.callback()])
    batch_tokens: list[int] = []
    collate = trainer.data_collator

    def counting(examples):
        batch = collate(examples)
        batch_tokens.append(int(batch["attention_mask"].sum()))
        return batch

    trainer.data_collator = counting
    trainer.train()
    return _peer_result(args, clock, batch_tokens, trainer)


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--mbs", type=int, default=4)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--model", default="tiny/qwen2-vl")
    ap.add_argument("--out", default="runs/bench_throughput")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--workers", type=int, default=0, help="train.num_workers for mmtune (the plain loop has none)")
    ap.add_argument("--repeats", type=int, default=5, help="runs per variant, interleaved; median and spread reported")
    ap.add_argument("--src", help="run mmtune from this src folder (e.g. an export of the previous commit)")
    ap.add_argument("--set", action="append", help="extra config override for mmtune, e.g. --set data.cache_mb=0")
    ap.add_argument("--peers", action="store_true", help="also HF Trainer + peft and TRL SFTTrainer")
    ap.add_argument("--trl-python", default=sys.executable,
                    help="the python that runs the TRL variant (a venv with trl and this environment's packages)")
    ap.add_argument("--variant", choices=["ours", "plain", "trainer", "trl"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        res = {"ours": run_ours, "plain": run_plain, "trainer": run_trainer, "trl": run_trl}[args.variant](args)
        print("RESULT " + json.dumps(res))
        return
    variants = ("ours", "plain", "trainer", "trl") if args.peers else ("ours", "plain")
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if args.src:
        env["PYTHONPATH"] = os.path.abspath(args.src)
    for variant in variants * args.repeats:
        python = args.trl_python if variant == "trl" else sys.executable
        cmd = [python, __file__, "--variant", variant, "--steps", str(args.steps), "--mbs", str(args.mbs),
               "--accum", str(args.accum), "--model", args.model, "--out", args.out,
               "--workers", str(args.workers)] + [a for kv in args.set or [] for a in ("--set", kv)]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        if out.returncode != 0 or not line:
            sys.exit(f"{variant} failed:\n{out.stderr[-3000:]}")
        runs[variant].append(json.loads(line[0][7:]))
    results = {}
    for v, rs in runs.items():
        tps = [r["tokens_per_s"] for r in rs]
        results[v] = {**{k: _median([r[k] for r in rs]) for k in rs[0] if isinstance(rs[0][k], (int, float))},
                      "tokens_per_s_spread": [min(tps), max(tps)], "tokens_per_s_runs": tps}
    # The ratio of each interleaved pair (ours_i / plain_i ran back to back, under the same load), median'd.
    def ratio_over(peer: str) -> dict:
        pair = [o["tokens_per_s"] / p["tokens_per_s"] for o, p in zip(runs["ours"], runs[peer])]
        return {"tokens_per_s": results["ours"]["tokens_per_s"] / results[peer]["tokens_per_s"],
                "tokens_per_s_pairwise_median": _median(pair), "tokens_per_s_pairwise_spread": [min(pair), max(pair)],
                "peak_memory_bytes": results["ours"]["peak_memory_bytes"] / results[peer]["peak_memory_bytes"]}

    ratio = ratio_over("plain")
    report = {"model": args.model, "steps": args.steps, "repeats": args.repeats, "workers": args.workers,
              "micro_batch_size": args.mbs, "grad_accum": args.accum, "src": args.src or "this checkout",
              "overrides": args.set or [], **results, "ratio_ours_over_plain": ratio,
              **{f"ratio_ours_over_{v}": ratio_over(v) for v in variants[2:]}}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{'':8} {'tokens/s (median)':>18} {'spread':>16} {'peak MiB':>10}")
    for v in variants:
        lo, hi = results[v]["tokens_per_s_spread"]
        print(f"{v:8} {results[v]['tokens_per_s']:18.0f} {lo:7.0f}-{hi:<8.0f} {results[v]['peak_memory_bytes'] / 2**20:10.0f}")
    for v in variants[1:]:
        r = report[f"ratio_ours_over_{v}"]
        print(f"{'ratio':8} {r['tokens_per_s']:18.2f} {'':16} {r['peak_memory_bytes']:10.2f}   (ours / {v};"
              f" pairwise median {r['tokens_per_s_pairwise_median']:.2f})")


if __name__ == "__main__":
    main()
