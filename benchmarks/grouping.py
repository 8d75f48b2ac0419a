"""data.group_by_length on vs off: padding fraction and tokens/s on a set whose lengths vary 5x.

    python benchmarks/grouping.py [--steps 40] [--repeats 3] [--json]

The set: N image+text records for tiny/qwen2-vl (a small PNG each, a question of 16-100 words, a short
answer), ~60 to ~300 tokens (5x). Both variants train the same records, steps and micro-batch (8, LoRA r8,
fp32, one thread), in their own processes, interleaved; tokens/s counts non-pad tokens over the timed
steps (the first is a warm-up); padding fraction = padded positions / all positions of the batches.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

# What the results file holds beside the provenance (tests/test_benchmark_results.py).
RESULT_KEYS = ("model", "records", "steps", "micro_batch_size", "repeats", "plain", "grouped", "ratio_pairwise_median")

WORDS = "red blue green square circle triangle count left right above below next to the a of and".split()


def make_set(folder: Path, n: int, seed: int = 0) -> Path:
    from PIL import Image

    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        img = folder / f"img{i}.png"
        if not img.exists():
            Image.new("RGB", (56, 56), (rng.randrange(256), 120, 60)).save(img)
        q = " ".join(rng.choice(WORDS) for _ in range(rng.randint(16, 100)))
        rows.append({"messages": [
            {"role": "user", "content": [{"type": "image", "path": img.name}, {"type": "text", "text": q + "?"}]},
            {"role": "assistant", "content": str(rng.randint(0, 9))}]})
    path = folder / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def variant_config(args, out: Path, mbs: int, *extra: str):
    """The config every variant of this benchmark and benchmarks/packing.py trains under (LoRA r8, fp32,
    CPU, data.max_length=512, one micro-batch a step), with the variant's own `extra` overrides."""
    from mmtune.config import load_config

    ov = [f"model.name={args.model}", "model.gradient_checkpointing=false", f"data.train={args.data}",
          "data.eval=null", "data.max_length=512", *extra,
          "adapter.method=lora", "adapter.r=8", "adapter.dropout=0.0", f"train.max_steps={args.steps}",
          f"train.micro_batch_size={mbs}", "train.grad_accum=1", "train.precision=fp32", "train.lr=1e-4",
          "train.warmup_steps=0", "train.scheduler=constant", "train.max_grad_norm=null", "train.device=cpu",
          "logging.tensorboard=false", f"output_dir={out}", "train.resume=false", "eval.every=null"]
    return load_config(Path(__file__).resolve().parents[1] / "recipes" / "demo_counting.yaml", ov)


def train_rows(out: Path) -> list[dict]:
    """The run's metrics.jsonl rows of its training steps."""
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]


def run_one(args, grouped: bool) -> dict:
    import time

    from mmtune.build import build_run
    from mmtune.train.loop import train

    out = Path(args.out) / ("grouped" if grouped else "plain")
    cfg = variant_config(args, out, args.mbs, f"data.group_by_length={str(grouped).lower()}")
    t0 = time.perf_counter()
    run = build_run(cfg)
    lengths = [x["total"] for x in run.train_lengths]
    summary = train(run)
    rows = train_rows(out)
    timed = rows[1:]
    secs = sum(r["step_time_s"] for r in timed)
    return {"tokens_per_s": sum(r["tokens_per_s"] * r["step_time_s"] for r in timed) / secs,
            "step_time_s": secs / len(timed), "padding_fraction": summary["padding_fraction"],
            "data_wait_fraction": summary["data_wait_fraction"], "wall_s": time.perf_counter() - t0,
            "final_loss": rows[-1]["loss"], "length_min": min(lengths), "length_max": max(lengths)}


def run_variants(script: str, args, variants: tuple[str, ...], *extra_cli: str) -> dict[str, list[dict]]:
    """Each variant `args.repeats` times, interleaved, each in its own process (`script --variant V`, one
    thread) on the same set: {variant: [its RESULT dicts]}."""
    data = make_set(Path(args.out) / "data", args.records)
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for variant in variants * args.repeats:
        cmd = [sys.executable, script, "--variant", variant, "--data", str(data), "--steps", str(args.steps),
               "--mbs", str(args.mbs), *extra_cli, "--model", args.model, "--out", args.out]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        if out.returncode != 0 or not line:
            sys.exit(f"{variant} failed:\n{out.stderr[-3000:]}")
        runs[variant].append(json.loads(line[0][7:]))
    return runs


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--mbs", type=int, default=8)
    ap.add_argument("--records", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default="tiny/qwen2-vl")
    ap.add_argument("--out", default="runs/bench_grouping")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--variant", choices=["plain", "grouped"], help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print("RESULT " + json.dumps(run_one(args, args.variant == "grouped")))
        return
    from _provenance import dumps, provenance

    started = provenance()
    runs = run_variants(__file__, args, ("plain", "grouped"))
    res = {v: {**{k: _median([r[k] for r in rs]) for k in rs[0]},
               "tokens_per_s_spread": [min(r["tokens_per_s"] for r in rs), max(r["tokens_per_s"] for r in rs)]}
           for v, rs in runs.items()}
    # Each grouped run over the plain run just before it (back to back, under the same load), median'd.
    pair = [g["tokens_per_s"] / p["tokens_per_s"] for p, g in zip(runs["plain"], runs["grouped"])]
    report = {"model": args.model, "records": args.records, "steps": args.steps, "micro_batch_size": args.mbs,
              "repeats": args.repeats, **res,
              "ratio_grouped_over_plain_tokens_per_s": res["grouped"]["tokens_per_s"] / res["plain"]["tokens_per_s"],
              "ratio_pairwise_median": _median(pair), "ratio_pairwise_runs": pair}
    if args.json:
        print(dumps(report, started))
        return
    for v in ("plain", "grouped"):
        r = res[v]
        print(f"{v:8} tokens/s {r['tokens_per_s']:8.0f} ({r['tokens_per_s_spread'][0]:.0f}-{r['tokens_per_s_spread'][1]:.0f})"
              f"  padding {r['padding_fraction']:.1%}  step {r['step_time_s'] * 1e3:.1f} ms")
    print(f"grouped / plain tokens/s: {report['ratio_grouped_over_plain_tokens_per_s']:.2f}")


if __name__ == "__main__":
    main()
