"""Where a benchmark figure came from, written into every results file by the script that measured it.

    from _provenance import provenance, write_results
    started = provenance()                      # at the start: commit, dirty flag, load before the run
    ... measure ...
    write_results(path, payload, started)       # payload + the provenance keys (load at the end added)
    print(dumps(payload, started))              # the same, for scripts that print JSON to stdout

The keys (PROVENANCE_KEYS, all at the top level of the results object): the git commit and whether the
tree had uncommitted changes when the run started (a dirty run's figures belong to no commit), the exact
command (sys.argv, as typed), the UTC date, python / torch / transformers versions, the CPU model, its
cores and the GPU (if any), the thread settings, and the 1-minute load average at the start and at the
end (this machine is shared: a figure measured at load 6 on 2 cores says so). tests/test_benchmark_results.py
checks that every results file under benchmarks/results/ carries these keys and the keys its script
writes, so no file is edited by hand.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROVENANCE_KEYS = ("commit", "dirty", "command", "date", "versions", "machine", "threads", "load_average")


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "peft", "trl", "accelerate"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def _gpu() -> str | None:
    if "torch" not in sys.modules:  # a script that never imported torch measured no GPU
        return None
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def provenance() -> dict:
    """The run's provenance as it starts (call it before measuring: the dirty flag and the load are the
    start's)."""
    # Untracked results the run is about to write do not make the tree dirty; changed code does.
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": _git("rev-parse", "HEAD") or None, "dirty": bool(status),
            "command": shlex.join([os.path.relpath(sys.argv[0], ROOT) if sys.argv[0] else "python", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "versions": _versions(),
            "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "gpu": None, "platform": platform.platform()},
            "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
            "load_average": {"start": round(os.getloadavg()[0], 2)}}


def finish(started: dict) -> dict:
    """The provenance with what is known only at the end: the load, the GPU and torch's threads."""
    out = json.loads(json.dumps(started))
    out["load_average"]["end"] = round(os.getloadavg()[0], 2)
    out["machine"]["gpu"] = _gpu()
    if "torch" in sys.modules:
        out["threads"]["torch"] = sys.modules["torch"].get_num_threads()
    return out


def with_provenance(payload: dict, started: dict) -> dict:
    clash = set(payload) & set(PROVENANCE_KEYS)
    if clash:
        raise ValueError(f"results keys {sorted(clash)} are provenance keys")
    return {**finish(started), **payload}


def dumps(payload: dict, started: dict) -> str:
    return json.dumps(with_provenance(payload, started), indent=2)


def write_results(path, payload: dict, started: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(payload, started) + "\n")
    return path


def text_header(started: dict) -> str:
    """The provenance as the first line of a .txt results file (`# provenance: {json}`)."""
    return "# provenance: " + json.dumps(finish(started))
