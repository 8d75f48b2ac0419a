"""The demo command on a busy CPU: OpenMP threads that spin between parallel regions vs threads that sleep.

    python benchmarks/openmp_waits.py [--busy 0,2] [--repeats 2] [--steps 150] [--save FILE]

Runs `mmtune train recipes/demo_counting.yaml train.max_steps=STEPS` (the installed command, in a fresh
process each time, its own output folder) under four settings, interleaved within each repeat, torch's
default threads (one per core) unless said:
- `libgomp_default`: GOMP_SPINCOUNT=300000, libgomp's default (a thread spins that long between parallel
  regions, then sleeps): what the command ran with before it set its own (cli._short_openmp_spins);
- `passive`: OMP_WAIT_POLICY=PASSIVE (a thread sleeps at once);
- `one_thread`: OMP_NUM_THREADS=1 (no parallel regions to wait in);
- `mmtune`: nothing set: the command's own setting, GOMP_SPINCOUNT=10000.
Each setting runs with `--busy N` other processes spinning on the CPU (pure-Python loops this script starts
and stops: a stand-in for whatever else a user's machine runs); N=0 is the machine as it is. Reported per
(busy, setting): wall seconds of the whole command, the CPU seconds it used (user + system, its children
included), and the run's own tokens/s from its summary.json; the medians over the repeats.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import provenance, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULT_KEYS = ("steps", "repeats", "busy", "results")
# The environment of each setting (OMP_WAIT_POLICY, OMP_NUM_THREADS and GOMP_SPINCOUNT are cleared first).
SETTINGS = {"libgomp_default": {"GOMP_SPINCOUNT": "300000"},  # libgomp's own default: what the command ran with
            "passive": {"OMP_WAIT_POLICY": "PASSIVE"},  # sleep at once
            "one_thread": {"OMP_NUM_THREADS": "1"},
            "mmtune": {}}  # the command's own setting now (cli._short_openmp_spins: GOMP_SPINCOUNT=10000)


def _spin(stop) -> None:
    while not stop.is_set():
        for _ in range(100_000):
            pass


def run_once(setting: str, steps: int, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT")}
    env.update(SETTINGS[setting])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(["mmtune", "train", "recipes/demo_counting.yaml", f"train.max_steps={steps}",
                           f"output_dir={out}", "eval.every=null"], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{setting} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {"wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "tokens_per_s": summary.get("tokens_per_s")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", default="0,2", help="comma-separated numbers of spinning processes to run beside")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--save")
    args = ap.parse_args()
    started = provenance()
    busy_levels = [int(b) for b in args.busy.split(",")]
    runs: dict = {str(b): {s: [] for s in SETTINGS} for b in busy_levels}
    with tempfile.TemporaryDirectory(prefix="mmtune_omp_") as tmp:
        for busy in busy_levels:
            stop = mp.Event()
            spinners = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(busy)]
            for p in spinners:
                p.start()
            try:
                for r in range(args.repeats):
                    for setting in SETTINGS:  # interleaved: each setting under the same minutes' conditions
                        res = run_once(setting, args.steps, Path(tmp) / f"{busy}_{setting}_{r}")
                        runs[str(busy)][setting].append(res)
                        print(f"busy {busy} {setting:10s} {res['wall_s']:7.1f} s wall {res['cpu_s']:7.1f} s CPU "
                              f"{res['tokens_per_s'] or 0:9.0f} tok/s", flush=True)
            finally:
                stop.set()
                for p in spinners:
                    p.join()
    results = {b: {s: {k: median(r[k] for r in rs) for k in ("wall_s", "cpu_s", "tokens_per_s")} | {"runs": rs}
                   for s, rs in per.items()} for b, per in runs.items()}
    if args.save:
        write_results(args.save, {"steps": args.steps, "repeats": args.repeats, "busy": busy_levels,
                                  "results": results}, started)


if __name__ == "__main__":
    main()
