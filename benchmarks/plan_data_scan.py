"""The data part of `mmtune plan` on seed 002's mixture: finding the worst-case record.

    python benchmarks/plan_data_scan.py [--src SRC_DIR] [--repeats 2] [--json]

Seed 002's mixture draws 100,000 samples from the look-alike ChartQA / InfoVQA / OCR-VQA sets (a few
dozen distinct records). `mmtune plan` finds the longest record with the no-pixel length engine
(`Encoder.measure`) and encodes only that one. Reports, per repeat, the CPU and wall seconds of
`worst_case_batch` for the training step and for the eval batch (the two calls `plan` makes), in a fresh
process each (`--src` runs another source tree, e.g. an older commit's `src/`, for a before/after),
and the total of `predict()` for context.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "seed002_docvqa_mixture_8gpu.yaml"
# what its --json output carries (tests/test_benchmark_results.py)
RESULT_KEYS = ("src", "rows")


def child() -> dict:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from mmtune.config import load_config
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.planner import _eval_batch, predict
    from mmtune.resolve import gpu_target, resolve_run

    os.chdir(ROOT)
    cfg = load_config(str(RECIPE), [])
    resolved = resolve_run(cfg, gpu_target("a100-40gb"))
    out = {}
    for name, scan in (("train", lambda: worst_case_batch(resolved)), ("eval", lambda: _eval_batch(resolved, None))):
        w, c = time.perf_counter(), time.process_time()
        pb = scan()
        out[name] = {"wall_s": round(time.perf_counter() - w, 2), "cpu_s": round(time.process_time() - c, 2),
                     "records_measured": pb.records_seen, "tokens": pb.tokens, "source": pb.source}
    w, c = time.perf_counter(), time.process_time()
    plan = predict(resolved)
    out["predict"] = {"wall_s": round(time.perf_counter() - w, 2), "cpu_s": round(time.process_time() - c, 2),
                      "peak_reserved_gib": round(plan.peak_reserved_bytes / 2**30, 2)}
    out["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=str(ROOT / "src"))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child()))
        return 0
    from _provenance import dumps, provenance

    started = provenance()
    rows = []
    for i in range(args.repeats):
        env = {**os.environ, "PYTHONPATH": args.src, "OMP_NUM_THREADS": "1"}
        res = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, env=env, check=True)
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        if not args.json:
            print(f"repeat {i}: train scan {r['train']['cpu_s']} s CPU ({r['train']['records_measured']} records "
                  f"measured), eval scan {r['eval']['cpu_s']} s CPU, predict {r['predict']['cpu_s']} s CPU / "
                  f"{r['predict']['wall_s']} s wall (load {r['load_avg_1m']})", flush=True)
    if args.json:
        print(dumps({"src": args.src, "rows": rows}, started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
