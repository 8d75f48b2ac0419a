"""Every shipped recipe planned on each GPU it names (plan/recipes.py), and the time `mmtune plan` takes to
print the smallest fix for one that does not fit (seed 001 on a T4), each in a fresh process as a user runs it.

    python benchmarks/recipes_fit.py [--out benchmarks/results/recipes_fit_cpu2_DATE.txt]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _provenance import provenance, text_header  # noqa: E402

FIX_CASE = ["recipes/seed001_qwen2.5-7b_lora.yaml", "--gpu", "t4"]


def _run(args: list[str]) -> tuple[str, float, float, int]:
    """(output, wall s, CPU s of the child, exit code) of `mmtune plan ARGS` in a fresh python."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "400", "TRANSFORMERS_VERBOSITY": "error"}
    before = os.times()
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "mmtune.cli", "plan", *args], cwd=ROOT, env=env, capture_output=True,
                       text=True)
    wall = time.perf_counter() - t0
    after = os.times()
    return p.stdout + p.stderr, wall, (after.children_user - before.children_user), p.returncode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from mmtune.plan.recipes import named_plans

    started = provenance()
    lines = [f"# {os.cpu_count()}-core machine shared with other sessions; each case a fresh `python -m mmtune.cli plan`"]
    for path in sorted((ROOT / "recipes").glob("*.yaml")):
        for ov, gpu, gpus, nodes in named_plans(path):
            load = os.getloadavg()[0]
            many = ["--gpus", str(gpus), "--nodes", str(nodes)] if gpus * nodes > 1 else []
            out, wall, cpu, rc = _run([str(path.relative_to(ROOT)), *ov, "--gpu", gpu, *many, "--no-fixes"])
            verdict = next((x for x in out.splitlines() if x.startswith(("fits ", "does NOT fit"))), out.strip()[-300:])
            shard = "".join(f" {w}" for w in many)  # nothing for one GPU: the lines read as before
            lines.append(f"mmtune plan {path.relative_to(ROOT)} {' '.join(ov)} --gpu {gpu}{shard}: exit {rc}; {verdict}; "
                         f"{wall:.1f} s wall, {cpu:.1f} s CPU (load {load:.1f})")
            print(lines[-1], flush=True)
    load = os.getloadavg()[0]
    out, wall, cpu, rc = _run(FIX_CASE)
    tail = [x for x in out.splitlines() if x.strip()][-6:]
    lines.append(f"mmtune plan {' '.join(FIX_CASE)} (plan + smallest fix): exit {rc}; {wall:.1f} s wall, {cpu:.1f} s CPU "
                 f"(load {load:.1f}); last lines:")
    lines += [f"    {x}" for x in tail]
    print("\n".join(lines[-7:]))
    if args.out:
        # The provenance line first (commit, command, load at start and end): tests/test_benchmark_results.py
        Path(args.out).write_text("\n".join([text_header(started), *lines]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
