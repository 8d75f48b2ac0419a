"""Launch a test's 2-rank job (torchrun, accelerate launch) on a free port, and keep what it printed.

The port is picked by binding port 0 and releasing it before the launcher binds it: another process may take it in
between (sessions run side by side here). A launch that failed on the port is launched again on a fresh one, at
most three times; any other failure is returned at once, its output kept whole for the assertion message."""

from __future__ import annotations

import re
import subprocess
import sys

from mmtune.serve.server import free_port  # a port nobody listens on now (the server's own pick)

BIND_FAILED = re.compile(r"address already in use|EADDRINUSE|errno 98|server socket has failed to (listen|bind)", re.I)


def torchrun_cmd(port: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port), *args]


def launch(make_cmd, *, tries: int = 3, **run_kwargs) -> subprocess.CompletedProcess:
    """`make_cmd(port)` run on a free port (captured text output), again on a fresh port if the port was taken."""
    for _ in range(tries):
        res = subprocess.run(make_cmd(free_port()), capture_output=True, text=True, **run_kwargs)
        if res.returncode == 0 or not BIND_FAILED.search(res.stdout + res.stderr):
            return res
    return res


def failure(res: subprocess.CompletedProcess, chars: int = 4000) -> str:
    """The assertion message of a failed launch: its exit code and the end of each stream."""
    return f"exit {res.returncode}\n--- stdout ---\n{res.stdout[-chars:]}\n--- stderr ---\n{res.stderr[-chars:]}"
