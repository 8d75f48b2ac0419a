"""Where start-up goes, and whether a change made it shorter (issue #30, item 4).

    python benchmarks/startup.py phases [--config recipes/demo_counting.yaml] [--gpu GPU] [--plan] [--save FILE]
    python benchmarks/startup.py compare --before COMMIT [--repeats 3] [--cases doctor_tiny,plan_7b,...] [--save FILE]

`phases` runs one fresh `python` (cold: nothing imported) that times, one after the other: the interpreter,
`import mmtune.cli`, `import torch`, `import transformers`, transformers' modeling stack
(`transformers.modeling_utils`, which its processors pull in), the doctor on CONFIG with the wall and CPU seconds
of every piece it builds (config, resolved run with its processor, model, data scan, plan ...) and of every
check, and with `--plan` the planner's `predict()` for the config on GPU. A piece's seconds include the pieces it
needed first; a check's include the pieces it was the first to need.

`compare` is the paired before/after figure on a shared machine: the commands below run as whole processes
(`python -m mmtune.cli ...`), with `PYTHONPATH` at the sources of COMMIT (extracted with `git archive`, so the
working tree is untouched) and at this checkout's `src/`, interleaved (ABBA order, repeat after repeat), and
report per side the median wall and CPU seconds (the process and its children) and the ratio before/after
(> 1: faster now), with the 1-minute load average at each run's start. Absolute seconds under load are not the
idle figure; the CPU seconds and the paired ratio are what compare.
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
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
RESULT_KEYS = ("mode", "cases", "results")

# name -> mmtune arguments (paths relative to the checkout; both sides read the same recipe files)
CASES = {
    "cli_help": ["--help"],
    "doctor_tiny": ["doctor", "recipes/demo_counting.yaml"],
    "plan_7b": ["plan", "recipes/seed001_qwen2.5-7b_lora.yaml", "--gpu", "quadro-rtx-6000"],
    "doctor_7b_plan": ["doctor", "recipes/seed001_qwen2.5-7b_lora.yaml", "--gpu", "quadro-rtx-6000"],
}


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(t: tuple[float, float]) -> dict:
    return {"wall_s": round(time.perf_counter() - t[0], 3), "cpu_s": round(time.process_time() - t[1], 3)}


def child(config: str, gpu: str | None, plan: bool) -> dict:
    """The phases, in this (fresh) process; printed as JSON for the parent."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    phases = {}
    t = _clock()
    import mmtune.cli  # noqa: F401  (the command line's own import: every command pays it)

    phases["import mmtune.cli"] = _since(t)
    t = _clock()
    import torch  # noqa: F401

    phases["import torch"] = _since(t)
    t = _clock()
    import transformers  # noqa: F401

    phases["import transformers"] = _since(t)
    t = _clock()
    import transformers.modeling_utils  # noqa: F401  (processing_utils imports it: any processor pays it)

    phases["import transformers.modeling_utils"] = _since(t)
    from mmtune.doctor.runner import run_doctor

    t = _clock()
    report = run_doctor(config, [], gpu)
    phases["doctor (all checks)"] = _since(t)
    pieces = {k: {"wall_s": round(w, 3), "cpu_s": round(c, 3)} for k, (w, c) in report.pieces.items()}
    checks = dict(sorted(((k, round(v, 3)) for k, v in report.seconds.items()), key=lambda kv: -kv[1]))
    out = {"phases": phases, "doctor_pieces": pieces, "doctor_checks_wall_s": checks,
           "doctor_errors": [f.code for f in report.errors], "not_run": [c for c, _, _ in report.not_run]}
    if plan:
        from mmtune.config import load_config
        from mmtune.plan.planner import predict

        t = _clock()
        predict(load_config(config), gpu=gpu)
        out["phases"]["plan predict() (a second build + trace, after the doctor's)"] = _since(t)
    return out


def phases(args) -> dict:
    cmd = [sys.executable, __file__, "_child", "--config", args.config] + (["--gpu", args.gpu] if args.gpu else []) + (
        ["--plan"] if args.plan else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        sys.exit(f"the child failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    inside = sum(p["wall_s"] for p in out["phases"].values())
    out["process"] = {"wall_s": round(wall, 3), "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime
                                                                  - before.ru_stime, 3),
                      "interpreter_and_exit_wall_s": round(wall - inside, 3)}
    return {"mode": "phases", "cases": {"config": args.config, "gpu": args.gpu, "plan": args.plan}, "results": out}


def _extract(commit: str, into: Path) -> Path:
    """COMMIT's src/ (and recipes/, which src/mmtune/recipes links to) via `git archive`: no checkout changes."""
    archive = subprocess.run(["git", "archive", commit, "src", "recipes"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def _run(src: Path, argv: list[str]) -> dict:
    load = round(os.getloadavg()[0], 2)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mmtune.cli", *argv], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(src), "TRANSFORMERS_VERBOSITY": "error"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": round(wall, 2), "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
            "rc": proc.returncode, "load_1m_at_start": load}


def compare(args) -> dict:
    names = args.cases.split(",")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    commit = subprocess.run(["git", "rev-parse", args.before], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    runs: dict = {n: {"before": [], "after": []} for n in names}
    with tempfile.TemporaryDirectory() as d:
        sides = {"before": _extract(commit, Path(d)), "after": ROOT / "src"}
        for r in range(args.repeats):
            for name in names:
                order = ("before", "after") if r % 2 == 0 else ("after", "before")  # ABBA: drift hits both sides
                for side in order:
                    row = _run(sides[side], CASES[name])
                    runs[name][side].append(row)
                    print(f"repeat {r} {name} {side}: {row}", file=sys.stderr, flush=True)
    results = {}
    for name, by in runs.items():
        med = {side: {k: round(median(x[k] for x in rows), 3) for k in ("wall_s", "cpu_s")} for side, rows in by.items()}
        results[name] = {"argv": CASES[name], "median": med,
                         "ratio_before_over_after": {k: round(med["before"][k] / med["after"][k], 2)
                                                     for k in ("wall_s", "cpu_s") if med["after"][k]},
                         "runs": by, "exit_codes": sorted({x["rc"] for rows in by.values() for x in rows})}
    return {"mode": "compare", "cases": {"before": commit, "after": "this checkout (see commit / dirty)",
                                         "repeats": args.repeats, "names": names}, "results": results}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("phases")
    p.add_argument("--config", default="recipes/demo_counting.yaml")
    p.add_argument("--gpu", default=None)
    p.add_argument("--plan", action="store_true", help="also time the planner's predict() on --gpu")
    p.add_argument("--save")
    c = sub.add_parser("compare")
    c.add_argument("--before", required=True, help="the commit to compare against (e.g. the branch's base)")
    c.add_argument("--repeats", type=int, default=3)
    c.add_argument("--cases", default="doctor_tiny,plan_7b,doctor_7b_plan")
    c.add_argument("--save")
    k = sub.add_parser("_child")
    k.add_argument("--config")
    k.add_argument("--gpu", default=None)
    k.add_argument("--plan", action="store_true")
    args = ap.parse_args()
    if args.mode == "_child":
        print(json.dumps(child(args.config, args.gpu, args.plan)))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _provenance import dumps, provenance, write_results

    started = provenance()
    report = phases(args) if args.mode == "phases" else compare(args)
    if args.save:
        write_results(args.save, report, started)
    print(dumps(report, started))


if __name__ == "__main__":
    main()
