"""mmtune's loop vs a plain transformers + peft loop (the seeds' way), same model, data and steps.

    python benchmarks/throughput.py [--steps 30] [--model tiny/qwen2-vl] [--repeats 5] [--json]
        [--src OTHER/src]   # run "ours" from another checkout's code (a before/after comparison)

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
    ap.add_argument("--variant", choices=["ours", "plain"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        res = run_ours(args) if args.variant == "ours" else run_plain(args)
        print("RESULT " + json.dumps(res))
        return
    runs: dict[str, list[dict]] = {"ours": [], "plain": []}
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if args.src:
        env["PYTHONPATH"] = os.path.abspath(args.src)
    for variant in ("ours", "plain") * args.repeats:
        cmd = [sys.executable, __file__, "--variant", variant, "--steps", str(args.steps), "--mbs", str(args.mbs),
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
    pair = [o["tokens_per_s"] / p["tokens_per_s"] for o, p in zip(runs["ours"], runs["plain"])]
    ratio = {"tokens_per_s": results["ours"]["tokens_per_s"] / results["plain"]["tokens_per_s"],
             "tokens_per_s_pairwise_median": _median(pair), "tokens_per_s_pairwise_spread": [min(pair), max(pair)],
             "peak_memory_bytes": results["ours"]["peak_memory_bytes"] / results["plain"]["peak_memory_bytes"]}
    report = {"model": args.model, "steps": args.steps, "repeats": args.repeats, "workers": args.workers,
              "micro_batch_size": args.mbs, "grad_accum": args.accum, "src": args.src or "this checkout",
              "overrides": args.set or [],
              "ours": results["ours"], "plain": results["plain"], "ratio_ours_over_plain": ratio}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{'':8} {'tokens/s (median)':>18} {'spread':>16} {'peak MiB':>10}")
    for v in ("ours", "plain"):
        lo, hi = results[v]["tokens_per_s_spread"]
        print(f"{v:8} {results[v]['tokens_per_s']:18.0f} {lo:7.0f}-{hi:<8.0f} {results[v]['peak_memory_bytes'] / 2**20:10.0f}")
    print(f"{'ratio':8} {ratio['tokens_per_s']:18.2f} {'':16} {ratio['peak_memory_bytes']:10.2f}   (ours / plain)")


if __name__ == "__main__":
    main()
