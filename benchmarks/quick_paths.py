"""How long two paths that must stay quick take: `mmtune doctor --fast` on a tiny-twin config (what
`mmtune train` runs before anything else) and loading 600 synthetic counting records (the demo's data).
Measured here, not asserted in the tests: a wall-clock limit fails on a loaded shared machine for reasons
that are not the code's.

    python benchmarks/quick_paths.py [--repeats 5] [--save FILE]

Each path runs --repeats times in this process after one warm-up call (imports and the processor's first
build are not counted); the median, min and max wall and CPU seconds are reported.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from statistics import median

RESULT_KEYS = ("repeats", "paths")


def _time(fn, repeats: int) -> dict:
    fn()  # warm-up: imports, caches
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"wall_s_median": round(median(wall), 3), "wall_s_range": [round(min(wall), 3), round(max(wall), 3)],
            "cpu_s_median": round(median(cpu), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--save", help="write the results (with their provenance) to this JSON file")
    args = ap.parse_args()
    from _provenance import dumps, provenance, write_results

    started = provenance()
    import yaml

    from mmtune.config.schema import DataConfig
    from mmtune.data.sources import load_records
    from mmtune.doctor.runner import run_doctor

    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "c.yaml"
        cfg.write_text(yaml.safe_dump({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": "synthetic:counting"}}))
        data = DataConfig(synthetic_train_size=600, synthetic_eval_size=50, synthetic_seed=4)
        paths = {"doctor_fast_tiny_qwen2_vl": _time(lambda: run_doctor(cfg, [], "t4", fast=True), args.repeats),
                 "synthetic_counting_600_records": _time(lambda: load_records("synthetic:counting", data, "train"),
                                                         args.repeats)}
    report = {"repeats": args.repeats, "paths": paths}
    if args.save:
        write_results(args.save, report, started)
    print(dumps(report, started) if args.save is None else json.dumps(paths, indent=2))


if __name__ == "__main__":
    main()
