"""Time to plan a 7B/8B and a 72B run, and a --search, on this machine's CPU (issue #11 targets on 2
cores: a 7B plan <= 15 s as a whole process, a 72B plan <= 30 s, a --search <= 60 s).

    python benchmarks/plan_speed.py [--json] [--only N] [--full-trace] [--cases 0,1,2,3]
`--full-trace` traces every layer (`predict(dedup=False)`: the figures before layer_dedup.py).
Each case runs in a fresh `python` (cold: no module imported, no FakeTensor cache filled by an earlier
case), as `mmtune plan` would. Reports `predict()`'s wall time (the target's figure: it includes the
first imports of transformers/peft/bitsandbytes, the model build and the traced steps) and its CPU
time (on a shared machine the wall time includes waiting for the cores), the time to import torch and
mmtune before it, the whole child process's wall time (interpreter start to exit), and the machine's
load average when it ran.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# what its --json output carries (tests/test_benchmark_results.py)
RESULT_KEYS = ("rows",)

DEFAULT = [("seed001 Qwen2.5-7B LoRA r128 seq512 fp16", "recipes/seed001_qwen2.5-7b_lora.yaml", [], "quadro-rtx-6000"),
           ("Qwen2-VL-7B LoRA 1 image 512x512 seq1024", None,
            ["model.name=Qwen/Qwen2-VL-7B-Instruct", "data.max_length=1024", "train.precision=bf16"], "a100-40gb"),
           ("Qwen2.5-72B QLoRA r64 seq1024 bf16 checkpointing", None,
            ["model.name=Qwen/Qwen2.5-72B-Instruct", "adapter.method=qlora", "adapter.r=64", "data.max_length=1024",
             "train.precision=bf16", "model.gradient_checkpointing=true"], "a100-80gb"),
           ("seed001 --search (micro-batch x checkpointing x lora/qlora x adamw/8bit)",
            "recipes/seed001_qwen2.5-7b_lora.yaml", ["--search"], "quadro-rtx-6000")]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", type=int, default=None, help="index of the default case to run (in this process)")
    ap.add_argument("--full-trace", action="store_true", help="trace every layer (no layer_dedup)")
    ap.add_argument("--cases", default=None, help="comma-separated indices of the cases to run (default: all)")
    args = ap.parse_args(argv)
    from _provenance import dumps, provenance

    started = provenance()
    if args.only is None:
        cases = [int(x) for x in args.cases.split(",")] if args.cases else list(range(len(DEFAULT)))
        return _fresh_processes(args.json, cases, args.full_trace, started)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    t0 = time.perf_counter()
    import torch  # noqa: F401

    from mmtune.config import load_config
    from mmtune.plan.planner import predict

    import_s = time.perf_counter() - t0
    rows = []
    cases = DEFAULT if args.only is None else [DEFAULT[args.only]]
    for name, path, ov, gpu in cases:
        search = "--search" in ov
        cfg = load_config(path, [o for o in ov if o != "--search"])
        w, c = time.perf_counter(), time.process_time()
        if search:
            from mmtune.plan.search import search as run_search

            res = run_search(cfg, gpu=gpu, dedup=not args.full_trace)
            r = res.best.result if res.best else None
            extra = {"candidates": len(res.tried)}
        else:
            r = predict(cfg, gpu=gpu, dedup=not args.full_trace)
            extra = {}
        rows.append({"name": name, "gpu": gpu, "full_trace": args.full_trace, "wall_s": round(time.perf_counter() - w, 2),
                     "cpu_s": round(time.process_time() - c, 2),
                     "peak_reserved_gib": round(r.peak_reserved_bytes / 2**30, 2) if r else None,
                     "process_total_gib": round(r.process_total_bytes / 2**30, 2) if r else None,
                     "step_time_s": round(r.step_time_s, 3) if r else None, "fits": r.fits if r else None,
                     "load_avg_1m": round(os.getloadavg()[0], 2), "cores": os.cpu_count(), **extra})
        if not args.json:
            x = rows[-1]
            print(f"{name}: plan {x['wall_s']} s wall, {x['cpu_s']} s CPU (load {x['load_avg_1m']} on {x['cores']} cores); "
                  f"{x['process_total_gib']} GiB on {gpu}, fits={x['fits']}", flush=True)
    for r in rows:
        r["import_s"] = round(import_s, 2)
    if args.json:
        print(dumps({"import_s": round(import_s, 2), "rows": rows}, started))
    else:
        print(f"imports: {import_s:.1f} s")
    return 0


def _fresh_processes(as_json: bool, cases: list, full_trace: bool, started: dict) -> int:
    """Every chosen case in its own `python` process, one after the other."""
    import resource
    import subprocess

    from _provenance import dumps

    rows = []
    for i in cases:
        t0 = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([sys.executable, __file__, "--only", str(i), "--json"] + (["--full-trace"] if full_trace else []),
                             capture_output=True, text=True, check=True).stdout
        total = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        row = json.loads(out[out.index("{"):])["rows"][0]
        row["process_wall_s"] = round(total, 2)
        # CPU time of the whole child (interpreter, imports, plan): what the wall time is on idle cores
        row["process_cpu_s"] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2)
        rows.append(row)
        if not as_json:
            print(f"{row['name']}: plan {row['wall_s']} s wall, {row['cpu_s']} s CPU (load {row['load_avg_1m']} on "
                  f"{row['cores']} cores); {row['process_total_gib']} GiB on {row['gpu']}, fits={row['fits']}; "
                  f"fresh process {row['process_wall_s']} s in all, {row['process_cpu_s']} s CPU (import torch+mmtune "
                  f"{row['import_s']} s)" + (f"; {row['candidates']} candidates" if "candidates" in row else ""),
                  flush=True)
    if as_json:
        print(dumps({"rows": rows}, started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
