"""Launch a benchmark script's own worker on 2 CPU ranks (torch.distributed.run) and read back what rank 0 wrote:
the fsdp and offload plan-accuracy benchmarks measure per-rank memory this way."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_two_ranks(script: str, names: list[str]) -> dict:
    """Run `script --worker OUT --only NAME ...` on 2 ranks; rank 0 writes its JSON rows to OUT."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "rows.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
               script, "--worker", str(out), *[a for n in names for a in ("--only", n)]]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        subprocess.run(cmd, check=True, env=env)
        return json.loads(out.read_text())
