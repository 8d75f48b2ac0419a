"""The command line's garbage-collector policy (docs/startup.md): start-up collects at a slower pace
(commands/startup_gc.py), `mmtune train` returns to the default before its loop, and the exit
(cli._freeze_before_exit) freezes the GC before the interpreter tears down, so shutdown skips its cycle
searches, while what a command registered to run at exit still runs after it."""

from __future__ import annotations

import subprocess
import sys

_PROG = """
import atexit, gc, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(f"{gc.get_freeze_count()} {gc.get_threshold()[0]}"))
sys.argv = ["mmtune", "--help"]
from mmtune.cli import main
main()
"""


def test_exit_freezes_the_gc_and_still_runs_atexit_handlers(tmp_path):
    marker = tmp_path / "atexit.txt"
    proc = subprocess.run([sys.executable, "-c", _PROG, str(marker)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Usage" in proc.stdout and "doctor" in proc.stdout  # the command's output, flushed
    frozen, young = map(int, marker.read_text().split())
    assert frozen > 0  # the handler ran, after the freeze had moved the live objects aside
    from mmtune.commands.startup_gc import STARTUP_THRESHOLD

    assert young == STARTUP_THRESHOLD[0]  # the command ran at the start-up pace


def test_start_up_pace_and_back():
    import gc

    from mmtune.commands import startup_gc

    before = gc.get_threshold()
    try:
        startup_gc.relax_for_startup()
        assert gc.get_threshold() == startup_gc.STARTUP_THRESHOLD
        startup_gc.relax_for_startup()  # twice: the default it returns to is still the process's own
        startup_gc.restore_default()
        assert gc.get_threshold() == before
    finally:
        gc.set_threshold(*before)


def test_the_installed_command_runs_main_not_the_bare_app():
    """The console script is what a user runs: it must go through main() (start-up pace, OpenMP waits, exit
    freeze), which the typer app alone skips."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    scripts = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]  # (tomllib is 3.11+; mmtune supports 3.10)
    assert re.search(r'^mmtune = "mmtune\.cli:main"', scripts, re.M), scripts


_ENV_PROG = """
import atexit, os, sys
out = sys.argv[1]
env = os.environ
atexit.register(lambda: open(out, "w").write(env.get("OMP_WAIT_POLICY", "-") + " " + env.get("GOMP_SPINCOUNT", "-")))
sys.argv = ["mmtune", "--help"]
from mmtune.cli import main
main()
"""


def test_openmp_threads_spin_briefly_unless_the_user_says(tmp_path):
    import os

    marker = tmp_path / "env.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}

    def run(**extra):
        proc = subprocess.run([sys.executable, "-c", _ENV_PROG, str(marker)], capture_output=True, text=True,
                              timeout=300, env={**env, **extra})
        assert proc.returncode == 0, proc.stderr[-2000:]
        return marker.read_text()

    assert run() == "- 10000"
    assert run(OMP_WAIT_POLICY="PASSIVE") == "PASSIVE -"  # the user's own choice is left alone
    assert run(GOMP_SPINCOUNT="500") == "- 500"


_GROUP_PROG = """
import atexit, sys
import torch.distributed as dist
out, store = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)  # as a launched rank has
atexit.register(lambda: open(out, "w").write(str(dist.is_initialized())))
sys.argv = ["mmtune", *sys.argv[3:]]
from mmtune.cli import main
main()
"""


def test_a_rank_leaves_its_process_group_after_a_command_that_succeeded_and_only_then(tmp_path):
    """Left to interpreter shutdown, gloo's threads can abort a rank whose work is done (SIGABRT, the launcher
    calls the run failed): main() destroys the group after success; after a failure it is left alone."""
    marker = tmp_path / "group.txt"

    def run(*args):
        proc = subprocess.run([sys.executable, "-c", _GROUP_PROG, str(marker), str(tmp_path / f"store{len(args)}"),
                               *args], capture_output=True, text=True, timeout=300)
        return proc.returncode, marker.read_text()

    assert run("--help") == (0, "False")
    code, still = run("train", str(tmp_path / "missing.yaml"))
    assert code != 0 and still == "True"
