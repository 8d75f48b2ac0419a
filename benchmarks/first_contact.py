"""The README's two first-contact commands on a fresh clone, timed: install + demo, then the tests.

    python benchmarks/first_contact.py [--fresh-venv] [--tests] [--save FILE]

Clones this checkout's HEAD into a temporary folder (only committed files: what a user gets), then in it:
1. `pip install -e ".[dev]"` with this interpreter (default: the environment as it is, torch already in), or
   with `--fresh-venv` in a new virtual environment with nothing installed (pip then also takes torch);
2. `mmtune train recipes/demo_counting.yaml` through the installed command: wall seconds, CPU seconds, and
   the run's held-out exact match and MAE with the baseline's, from its summary.json;
3. with `--tests`: `python -m pytest` as the README gives it, its wall seconds and its summary line
   (passed / skipped / xfailed / failed counts).
Each phase records the 1-minute load average at its start and end. Installing into this interpreter
(without --fresh-venv) re-points its editable mmtune at the temporary clone: install this checkout again
afterwards (`pip install -e .`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import provenance, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULT_KEYS = ("clone_commit", "fresh_venv", "python", "phases")


def _phase(name: str, cmd: list[str], cwd: Path, env: dict | None = None, timeout: int = 7200) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {"command": " ".join(cmd), "rc": proc.returncode, "wall_s": round(wall, 1),
           "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
           "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)]}
    print(f"{name}: rc {proc.returncode}, {out['wall_s']} s wall, {out['cpu_s']} s CPU, load {out['load_average']}",
          flush=True)
    out["tail"] = (proc.stdout + proc.stderr)[-1500:]
    failures = re.search(r"^=+ FAILURES =+$(.*?)^=+ (warnings summary|short test summary)", proc.stdout, re.M | re.S)
    if failures:  # a failed test's own report (the tail holds only the summary): the first 8,000 characters
        out["failures"] = failures.group(1).strip()[:8000]
        out["failed_tests"] = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)  # every one, by name
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fresh-venv", action="store_true", help="install into a new virtual environment")
    ap.add_argument("--tests", action="store_true", help="also run the README's test command")
    ap.add_argument("--save")
    args = ap.parse_args()
    started = provenance()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    phases: dict = {}
    with tempfile.TemporaryDirectory(prefix="mmtune_first_contact_") as tmp:
        clone = Path(tmp) / "mmtune"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "checkout", "-q", head], cwd=clone, check=True)
        python = sys.executable
        if args.fresh_venv:
            subprocess.run([sys.executable, "-m", "venv", str(Path(tmp) / "venv")], check=True)
            python = str(Path(tmp) / "venv" / "bin" / "python")
        env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        env.pop("PYTHONPATH", None)
        phases["install"] = _phase("install", [python, "-m", "pip", "install", "-q", "-e", ".[dev]"], clone, env)
        mmtune = str(Path(python).parent / "mmtune")
        phases["demo"] = _phase("demo", [mmtune, "train", "recipes/demo_counting.yaml"], clone, env)
        summary = clone / "runs" / "demo_counting" / "summary.json"
        if summary.exists():
            s = json.loads(summary.read_text())
            phases["demo"]["eval"], phases["demo"]["baseline"] = s.get("eval"), s.get("baseline")
            phases["demo"]["tokens_per_s"] = s.get("tokens_per_s")
        if args.tests:
            phases["tests"] = _phase("tests", [python, "-m", "pytest"], clone, env)
            lines = [ln for ln in phases["tests"]["tail"].splitlines() if re.search(r"\d+ (passed|failed)", ln)]
            phases["tests"]["summary_line"] = lines[-1].strip("= ") if lines else None
        versions = subprocess.run([python, "-c", "import torch, transformers; print(torch.__version__, "
                                   "transformers.__version__)"], capture_output=True, text=True).stdout.split()
    if args.save:
        write_results(args.save, {"clone_commit": head, "fresh_venv": args.fresh_venv,
                                  "python": dict(zip(("torch", "transformers"), versions)),
                                  "phases": phases}, started)
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "tail"} for k, v in phases.items()}, indent=1))


if __name__ == "__main__":
    main()
