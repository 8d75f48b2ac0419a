"""Data wait with DataLoader workers on real-size images: how long the loop waits for micro-batches.

    python benchmarks/data_wait.py [--workers 0,1,2] [--steps 40] [--mbs 2] [--repeats 2]
        [--model tiny/qwen2-vl] [--max-pixels 1003520] [--out runs/bench_data_wait] [--json FILE]
        [--src OTHER/src]   # run mmtune from another checkout's code (a before/after comparison)

The set: photos-like images at real sizes (half 1280x960 JPEG, half 640x480 PNG: smooth colour fields
plus sensor-like noise, so they compress and decode like photos, not like flat test images), one per
record with a question and a short answer. The Qwen2-VL processor runs at the cap most Qwen2-VL recipes
set (model.max_pixels = 1280*28*28 = 1,003,520: a 1280x960 image becomes ~1,270 merged tokens, a 640x480
one ~390). The model is the tiny twin, so a step is short and the data side is heavy: the benchmark
prints the ratio of encode time (one record, measured in-process) to compute time (a step at 0 workers
minus its data wait).

Every record is drawn once (records = steps x micro-batch): no encode-cache hits, the worst case. Per run
(train.num_workers = each of --workers, interleaved across repeats, one process each, 1 thread per
process): summary.json's data_wait_fraction (the whole run, step 1 included), the steady-state fraction
(steps 2..N), step 1's data wait (worker start-up + first batch), the median step time and the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

# What the results file holds beside the provenance (tests/test_benchmark_results.py).
RESULT_KEYS = ("model", "max_pixels", "steps", "micro_batch_size", "results")

SIZES = [((1280, 960), "jpg"), ((640, 480), "png")]


def make_set(folder: Path, n: int, seed: int = 0) -> Path:
    import numpy as np
    from PIL import Image, ImageFilter

    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        (w, h), ext = SIZES[i % len(SIZES)]
        img = folder / f"img{i}.{ext}"
        if not img.exists():
            base = Image.fromarray(nrng.integers(0, 256, (h // 32, w // 32, 3), dtype=np.uint8)).resize((w, h), Image.BICUBIC)
            noise = nrng.normal(0, 12, (h, w, 3))
            arr = np.clip(np.asarray(base.filter(ImageFilter.GaussianBlur(4)), dtype=np.float32) + noise, 0, 255)
            Image.fromarray(arr.astype(np.uint8)).save(img, **({"quality": 90} if ext == "jpg" else {}))
        rows.append({"messages": [
            {"role": "user", "content": [{"type": "image", "path": img.name},
                                         {"type": "text", "text": "How many red shapes are there?"}]},
            {"role": "assistant", "content": str(rng.randint(0, 9))}]})
    path = folder / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config(args, workers: int, out: Path):
    from mmtune.config import load_config

    return load_config(None, [
        f"model.name={args.model}", "model.gradient_checkpointing=false", f"model.max_pixels={args.max_pixels}",
        f"data.train={args.data}", "data.eval=null", "data.max_length=2048", "adapter.method=lora", "adapter.r=8",
        "adapter.dropout=0.0", f"train.max_steps={args.steps}", f"train.micro_batch_size={args.mbs}",
        "train.grad_accum=1", "train.precision=fp32", "train.lr=1e-4", "train.warmup_steps=0",
        "train.scheduler=constant", "train.max_grad_norm=null", "train.device=cpu", "logging.tensorboard=false",
        f"output_dir={out}", "train.resume=false", "eval.every=null", f"train.num_workers={workers}",
        *(args.set or [])])


def run_one(args) -> dict:
    from mmtune.build import build_run
    from mmtune.train.loop import train

    out = Path(args.out) / f"w{args.run_workers}"
    t0 = time.perf_counter()
    run = build_run(config(args, args.run_workers, out))
    build_s = time.perf_counter() - t0
    encode_s = []
    for r in run.train_set.records[:4]:  # one record's encode, in this process (what a worker does per record)
        t1 = time.perf_counter()
        run.encoder.encode(r)
        encode_s.append(time.perf_counter() - t1)
    c0 = time.process_time()
    t0 = time.perf_counter()
    summary = train(run)
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["kind"] == "train"]
    steady = rows[1:]
    return {"workers": args.run_workers, "data_wait_fraction": summary["data_wait_fraction"],
            "steady_data_wait_fraction": sum(r["data_wait_s"] for r in steady) / sum(r["step_time_s"] for r in steady),
            "first_step_data_wait_s": rows[0]["data_wait_s"], "first_step_s": rows[0]["step_time_s"],
            "step_s_median": median(r["step_time_s"] for r in steady),
            "compute_s_median": median(r["step_time_s"] - r["data_wait_s"] for r in steady),
            "encode_s_per_record": median(encode_s), "train_wall_s": wall, "build_s": build_s,
            "main_process_cpu_s": time.process_time() - c0, "loadavg_1min": os.getloadavg()[0],
            "decisions": [d for d in summary["decisions"] if "worker" in d or "num_workers" in d]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--mbs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--model", default="tiny/qwen2-vl")
    ap.add_argument("--max-pixels", type=int, default=1280 * 28 * 28)
    ap.add_argument("--out", default="runs/bench_data_wait")
    ap.add_argument("--set", action="append", help="extra config override, e.g. --set data.cache_mb=0")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--src", help="run mmtune from this src folder (e.g. an export of an earlier commit)")
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--run-workers", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run_workers is not None:
        import torch

        torch.set_num_threads(1)
        print("RESULT " + json.dumps(run_one(args)))
        return
    from _provenance import provenance, write_results

    started = provenance()
    data = make_set(Path(args.out) / "data", args.steps * args.mbs)
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.path.abspath(args.src) if args.src else str(Path(__file__).resolve().parents[1] / "src")}
    workers = [int(w) for w in args.workers.split(",")]
    runs: dict[int, list[dict]] = {w: [] for w in workers}
    for rep in range(args.repeats):
        for w in (workers if rep % 2 == 0 else workers[::-1]):
            cmd = [sys.executable, __file__, "--run-workers", str(w), "--data", str(data), "--steps", str(args.steps),
                   "--mbs", str(args.mbs), "--model", args.model, "--max-pixels", str(args.max_pixels),
                   "--out", args.out] + [a for kv in args.set or [] for a in ("--set", kv)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if out.returncode != 0 or not line:
                sys.exit(f"workers={w} failed:\n{out.stderr[-3000:]}")
            runs[w].append(json.loads(line[0][7:]))
            print(json.dumps(runs[w][-1]), flush=True)
    results = {}
    for w, rs in runs.items():
        results[w] = {k: median(r[k] for r in rs) for k in rs[0] if isinstance(rs[0][k], (int, float))}
        results[w]["runs"] = rs
    zero = results.get(0)
    print(f"{'workers':>7} {'wait frac (run)':>15} {'wait frac (2..N)':>16} {'step 1 wait s':>13} {'step s':>7} "
          f"{'train wall s':>12} {'load':>5}")
    for w, r in results.items():
        print(f"{w:7d} {r['data_wait_fraction']:15.3f} {r['steady_data_wait_fraction']:16.3f} "
              f"{r['first_step_data_wait_s']:13.2f} {r['step_s_median']:7.3f} {r['train_wall_s']:12.1f} "
              f"{r['loadavg_1min']:5.2f}")
    if zero:
        ratio = zero["encode_s_per_record"] * args.mbs / zero["compute_s_median"]
        print(f"data : compute per step at 0 workers = {zero['encode_s_per_record'] * args.mbs:.3f} s : "
              f"{zero['compute_s_median']:.3f} s = {ratio:.2f}")
    report = {"model": args.model, "src": args.src or "this checkout", "max_pixels": args.max_pixels,
              "steps": args.steps, "micro_batch_size": args.mbs,
              "sizes": [f"{w}x{h} {ext}" for (w, h), ext in SIZES], "overrides": args.set or [],
              "results": results}
    if args.json:
        write_results(args.json, report, started)


if __name__ == "__main__":
    main()
