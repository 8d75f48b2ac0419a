"""Time from `mmtune train` to its first optimizer step on a large image dataset (default 100k records).

    python benchmarks/first_step.py [N] [--images K] [--set key=value ...]

Builds an N-record JSONL of image questions over K distinct PNGs (several questions per image, as VQA
sets have; every tenth record text-only), then runs `mmtune train` on the tiny Qwen2-VL twin for one
step in a fresh process and reports: the whole command's wall time, the time until the first training
step's metrics line was written (the loop appends it right after the step), the CPU seconds of the train
process itself until then (/proc: the machine is shared, so wall time depends on the load) and of the whole
command with every process it started (`cpu_s`), the 1-min load average at start and end, and the start-up
figures from the run's summary (`startup`: config + resolve, record loading, the check's own seconds). The goal
in issue #16 is a first step within 30 s of start.

Since the start-up check runs beside training on sets of 10,000+ records (data.startup_scan=auto, see
docs/data.md), step 1 no longer waits for it, but this one-step run still does at its end: `wall_s` includes the
check (its report goes into summary.json), `first_step_s` does not. `--set data.startup_scan=before` gives the
old behaviour for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doctor_speed import make_dataset  # noqa: E402  (the same generated layout as the doctor benchmark)

# What the results file holds beside the provenance (tests/test_benchmark_results.py).
RESULT_KEYS = ("records", "images", "first_step_s", "wall_s", "cpu_s", "train_process_cpu_to_first_step_s", "startup")


def _process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) the train process itself has used so far: /proc/PID/stat fields 14-15."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=100_000)
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args()
    from _provenance import dumps, provenance

    started = provenance()
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        t = time.perf_counter()
        data = make_dataset(folder, args.n, args.images)
        made = time.perf_counter() - t
        out = folder / "run"
        cmd = [sys.executable, "-m", "mmtune.cli", "train", str(Path(__file__).resolve().parents[1] / "recipes" /
               "demo_counting.yaml"), f"data.train={data}", "data.eval=null", "train.max_steps=1",
               "eval.every=null", "train.save_every=null", "train.warmup_steps=0",
               "logging.tensorboard=false", f"output_dir={out}",
               "data.max_length=2048", "model.max_pixels=200704", *args.set]
        load_start = open("/proc/loadavg").read().split()[0]
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
        first_step = None
        metrics = out / "metrics.jsonl"
        cpu_first = None
        while proc.poll() is None:
            if first_step is None and metrics.exists() and metrics.stat().st_size:
                first_step = time.time() - start
                cpu_first = _process_cpu(proc.pid)
            time.sleep(0.05)
        wall = time.time() - start
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the train process and every process it waited for
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        log = proc.stdout.read()
        if proc.returncode != 0:
            sys.exit(f"train failed ({proc.returncode}):\n{log[-4000:]}")
        summary = json.loads((out / "summary.json").read_text())
        step1 = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    startup = summary.get("startup") or {}
    known = sum(v for k, v in startup.items() if k in ("config_and_resolve_s", "preflight_s", "build_s"))
    # What the run does not time itself: interpreter start and imports before `run_training`, the start
    # summary, the loop's set-up and the first step (whose own time is step_time_s).
    rest = first_step - known if first_step and startup else None
    print(dumps({"records": args.n, "images": args.images, "dataset_made_s": round(made, 1),
                      "first_step_s": first_step and round(first_step, 1), "wall_s": round(wall, 1),
                      "cpu_s": round(cpu, 1), "train_process_cpu_to_first_step_s": cpu_first,
                      "overrides": args.set, "startup": startup,
                      "first_step_time_s": step1.get("step_time_s"),
                      "imports_loop_setup_and_step_s": rest and round(rest, 1),
                      "load_average_start": load_start,
                      "load_average_end": open("/proc/loadavg").read().split()[0]}, started))


if __name__ == "__main__":
    main()
