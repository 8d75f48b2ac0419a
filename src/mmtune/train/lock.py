"""One training process per output_dir: a lock file holding the holder's PID, host and start time.

Two runs writing one folder interleave metrics rows, move `best` under each other and resume from
each other's checkpoints. The lock is created atomically (O_EXCL); a lock left by a process that no
longer exists on this host is stale and taken over with a note. A lock from another host cannot be
checked from here: the error names that host and PID and says how to clear it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = ".mmtune.lock"
_held: dict[str, int] = {}  # lock path -> nesting depth in this process (run_training, then train)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _try_create(path: Path, me: dict) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump(me, f)
        f.flush()
        os.fsync(f.fileno())
    return True


def acquire(output_dir: str | Path) -> Path:
    from ..console import console
    from ..errors import MMTuneError

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_NAME
    host = socket.gethostname()
    me = {"pid": os.getpid(), "host": host, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
          "command": " ".join(sys.argv)[:300]}
    for _ in range(3):
        if _try_create(path, me):
            return path
        holder = _read(path)
        if holder is None:
            # Created but not yet written (a few microseconds), or damaged: give a writer a moment.
            time.sleep(0.2)
            holder = _read(path)
            if holder is None:
                raise MMTuneError(f"{out} has a lock file that cannot be read", where=str(path),
                                  fix=f"if no mmtune run uses {out}, delete {path} and start again")
        pid, holder_host = holder.get("pid"), holder.get("host")
        if holder_host == host and isinstance(pid, int) and (not _alive(pid) or pid == os.getpid()):
            # Same host, and the holder is gone (killed, crashed, machine rebooted): a stale lock. The same
            # PID as ours means an earlier run of this very process that did not release it.
            path.unlink(missing_ok=True)
            console.print(f"removed a stale lock of PID {pid} (no longer running) in {out}")
            continue
        raise MMTuneError(
            f"{out} is in use by another mmtune run: PID {pid} on host {holder_host}, started {holder.get('started')}",
            where=str(path),
            fix="wait for that run to finish or stop it, or give this run another output_dir"
                + ("" if holder_host == host else
                   f"; if that run's machine is gone, delete {path} (a lock from another host cannot be checked from here)"))
    raise MMTuneError(f"could not take the lock {path}", where=str(path), fix=f"delete {path} if no run uses {out}")


def release(path: Path) -> None:
    holder = _read(path)
    if holder is not None and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
        path.unlink(missing_ok=True)


@contextmanager
def output_dir_lock(output_dir: str | Path, enabled: bool = True):
    """Hold the output_dir's lock for the block; re-entrant within one process."""
    if not enabled:
        yield
        return
    key = str((Path(output_dir) / LOCK_NAME).resolve())
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    path = acquire(output_dir)
    _held[key] = 1
    try:
        yield
    finally:
        del _held[key]
        release(path)
