"""The command line's exit (cli._freeze_before_exit): the GC is frozen before the interpreter tears down, so
shutdown skips its cycle searches, and what a command registered to run at exit still runs after it."""

from __future__ import annotations

import subprocess
import sys

_PROG = """
import atexit, gc, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(str(gc.get_freeze_count())))
sys.argv = ["mmtune", "--help"]
from mmtune.cli import main
main()
"""


def test_exit_freezes_the_gc_and_still_runs_atexit_handlers(tmp_path):
    marker = tmp_path / "atexit.txt"
    proc = subprocess.run([sys.executable, "-c", _PROG, str(marker)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Usage" in proc.stdout and "doctor" in proc.stdout  # the command's output, flushed
    assert int(marker.read_text()) > 0  # the handler ran, after the freeze had moved the live objects aside
