"""Per-rank peak of a real FSDP2 run on 2 CPU gloo ranks vs `mmtune plan --gpus 2 --strategy fsdp`.

Each row plans the run for 2 ranks under fsdp on this machine as target (`predict(cfg, gpus=2,
strategy="fsdp")`, CPU: live tensor bytes per rank, no allocator rounding) and then runs the same two
optimizer steps for real on 2 gloo ranks launched by torchrun (`mmtune.plan.measure.measure_sharded_step`:
the run built as `mmtune train` builds it, FSDP2 applied; the peak from torch.profiler's allocator events,
as benchmarks/planner_accuracy.py measures a single process). Every rank's peak of every repeat (a fresh
torchrun launch each) is reported; the error is taken against the largest, and the spread says how much
the same run moves: gloo runs its collectives on its own threads, whose buffers (the prefetched unit's
all-gather) overlap the backward at a moment that varies from run to run.

    python benchmarks/fsdp_plan_accuracy.py [--only NAME] [--repeats 3] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# what its --out file carries (tests/test_benchmark_results.py)
RESULT_KEYS = ("rows", "runs", "repeats", "mean_abs_error_pct", "max_abs_error_pct", "max_spread_pct")

# name, overrides, declared media (as benchmarks/planner_accuracy.py)
RUNS = [
    ("text-lora-ckpt", ["model.name=tiny/qwen2", "adapter.method=lora", "model.gradient_checkpointing=true"], {}),
    ("text-lora-nockpt", ["model.name=tiny/qwen2", "adapter.method=lora", "model.gradient_checkpointing=false"], {}),
    ("text-full-ckpt", ["model.name=tiny/qwen2", "adapter.method=full", "model.gradient_checkpointing=true"], {}),
    ("text-full-nockpt", ["model.name=tiny/qwen2", "adapter.method=full", "model.gradient_checkpointing=false"], {}),
    ("image-lora-ckpt", ["model.name=tiny/qwen2-vl", "adapter.method=lora", "model.gradient_checkpointing=true"],
     {"images": [(112, 112)]}),
    # issue 29: QLoRA under FSDP2 (4-bit data stored in the compute dtype, sharded; the quant state whole per rank)
    ("text-qlora-nockpt", ["model.name=tiny/qwen2", "adapter.method=qlora", "model.gradient_checkpointing=false"], {}),
    ("text-qlora-ckpt", ["model.name=tiny/qwen2", "adapter.method=qlora", "model.gradient_checkpointing=true"], {}),
    ("image-full-nockpt", ["model.name=tiny/qwen2-vl", "adapter.method=full", "model.gradient_checkpointing=false"],
     {"images": [(112, 112)]}),
    ("image-full-ckpt-448", ["model.name=tiny/qwen2-vl", "adapter.method=full", "model.gradient_checkpointing=true",
                             "data.max_length=2048"], {"images": [(448, 448)]}),
    ("video-lora-nockpt", ["model.name=tiny/qwen2-vl", "adapter.method=lora", "model.gradient_checkpointing=false"],
     {"videos": [(4, 112, 112)]}),
]
COMMON = ["data.max_length=512", "train.precision=fp32", "train.device=cpu", "train.grad_accum=2",
          "train.strategy=fsdp"]


def config_and_batch(overrides, declared):
    from mmtune.config import load_config
    from mmtune.plan.batch import Declared, worst_case_batch
    from mmtune.plan.planner import resolve_for_plan

    cfg = load_config(None, COMMON + overrides)
    decl = Declared(images=declared.get("images", []), videos=declared.get("videos", []),
                    audio_seconds=declared.get("audio_seconds", []))
    return cfg, decl, worst_case_batch(resolve_for_plan(cfg), declared=decl).micro_batch


def worker(names: list[str], out: Path) -> None:
    """On each rank (torchrun): every row's real 2-rank step; rank 0 writes every rank's peak."""
    import torch.distributed as dist

    from mmtune.plan.measure import measure_sharded_step

    rows = {}
    for name, ov, decl in RUNS:
        if name not in names:
            continue
        cfg, _, batch = config_and_batch(ov, decl)
        m = measure_sharded_step(cfg, batch)
        peaks = [None] * dist.get_world_size()
        dist.all_gather_object(peaks, [m.peak_allocated_bytes, m.baseline_bytes])
        rows[name] = peaks
    if dist.get_rank() == 0:
        out.write_text(json.dumps(rows))


def measure_two_ranks(names: list[str]) -> dict:
    from _two_ranks import measure_two_ranks as on_two_ranks

    return on_two_ranks(__file__, names)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--out", help="also write the JSON results to this file")
    ap.add_argument("--repeats", type=int, default=3, help="2-rank launches (each measures every row once)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--measured", help="re-plan against the per-rank peaks of an earlier --out file (no 2-rank run)")
    args = ap.parse_args(argv)
    from _provenance import provenance, write_results

    started = provenance()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    names = args.only or [r[0] for r in RUNS]
    if args.worker:
        worker(names, Path(args.worker))
        return 0
    from mmtune.plan.planner import predict

    t0 = time.perf_counter()
    if args.measured:
        earlier = {r["name"]: r["measured_bytes_per_repeat_and_rank"]
                   for r in json.loads(Path(args.measured).read_text())["rows"]}
        measured = {n: earlier[n] for n in names}
    else:
        launches = [measure_two_ranks(names) for _ in range(args.repeats)]
        measured = {n: [[p for p, _ in launch[n]] for launch in launches] for n in names}
        baselines = {n: [b for _, b in launches[0][n]] for n in names}
    measure_s = time.perf_counter() - t0
    rows = []
    for name, ov, decl in RUNS:
        if name not in names:
            continue
        cfg, d, _ = config_and_batch(ov, decl)
        res = predict(cfg, gpus=2, strategy="fsdp", declared=d, plan_eval=False)
        every = [b for launch in measured[name] for b in launch]
        worst, least = max(every), min(every)
        pred = res.peak_allocated_bytes
        rows.append({"name": name, "predicted_bytes": pred, "measured_bytes_per_repeat_and_rank": measured[name],
                     "baseline_bytes_per_rank": None if args.measured else baselines[name],
                     "error_pct": 100.0 * (pred - worst) / worst,
                     "error_vs_least_pct": 100.0 * (pred - least) / least,
                     "spread_pct": 100.0 * (worst - least) / worst,
                     "breakdown": res.breakdown, "peak_phase": res.peak_phase})
        r = rows[-1]
        print(f"{name:22s} predicted {pred:>12,d}  measured {least:>12,d} .. {worst:>12,d} (spread {r['spread_pct']:.1f} %)"
              f"  error {r['error_pct']:+6.2f} % vs the largest, {r['error_vs_least_pct']:+6.2f} % vs the least", flush=True)
    errs = [abs(r["error_pct"]) for r in rows]
    summary = {"runs": len(rows), "repeats": len(next(iter(measured.values()))),
               "mean_abs_error_pct": sum(errs) / len(errs), "max_abs_error_pct": max(errs),
               "max_spread_pct": max(r["spread_pct"] for r in rows), "measure_s": round(measure_s, 1)}
    print(f"mean |error| {summary['mean_abs_error_pct']:.2f} %, max {summary['max_abs_error_pct']:.2f} % over {len(rows)} runs")
    if args.out:
        write_results(args.out, {"rows": rows, **summary}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
