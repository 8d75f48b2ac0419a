"""One training process per output_dir: a lock file holding the holder's PID, host and start time.

Two runs writing one folder interleave metrics rows, move `best` under each other and resume from
each other's checkpoints. The lock appears atomically and complete: its content is written and fsynced
to a private temporary file first, which is then hard-linked to the lock's name (a link, unlike a
rename, fails when the name exists: exclusive like O_EXCL). So mmtune never leaves an empty or half-written
lock, not on a full disk (a clear error, the temporary file removed) nor when killed mid-write. A lock
left by a process that no longer exists on this host is stale and taken over with a note; so is an empty
lock file (only an earlier mmtune, killed or out of disk between creating and writing it, left those). A
lock from another host cannot be checked from here: the error names that host and PID and says how to
clear it.
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
    """Create the lock holding `me`, complete, or return False when a lock exists. OSError (a full disk)
    leaves nothing behind."""
    import errno

    tmp = path.with_name(f"{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        with open(tmp, "x") as f:
            json.dump(me, f)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK, errno.EXDEV):
                raise
        # A filesystem without hard links: create exclusively and write; a failed write removes the file.
        return _create_exclusive(path, me)
    finally:
        tmp.unlink(missing_ok=True)


def _create_exclusive(path: Path, me: dict) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        path.unlink(missing_ok=True)  # ours, and empty or partial: never left for the next run to trip on
        raise
    return True


def _disk_error(out: Path, path: Path, e: OSError):
    import shutil

    from ..errors import MMTuneError
    from .durable import fmt_bytes, is_disk_full

    if is_disk_full(e):
        try:
            free = f" ({fmt_bytes(shutil.disk_usage(out).free)} free)"
        except OSError:
            free = ""
        return MMTuneError(f"cannot start: the disk of {out} is full{free}, not even the lock file could be written",
                           where=str(path), fix=f"free space on that disk (old runs, caches, leftover checkpoints in "
                                                 f"{out}), then run the same command again")
    return MMTuneError(f"cannot write the lock file {path}: {e.strerror or e}", where=str(path),
                       fix=f"check that {out} is writable and its disk healthy")


def acquire(output_dir: str | Path) -> Path:
    from ..console import console
    from ..errors import MMTuneError

    out = Path(output_dir)
    path = out / LOCK_NAME
    host = socket.gethostname()
    me = {"pid": os.getpid(), "host": host, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
          "command": " ".join(sys.argv)[:300]}
    _remove_dead_temporaries(out)
    for _ in range(3):
        try:
            out.mkdir(parents=True, exist_ok=True)
            if _try_create(path, me):
                return path
        except OSError as e:
            raise _disk_error(out, path, e) from None
        holder = _read(path)
        if holder is None:
            # Damaged, or an earlier mmtune's lock between its creation and its write: give a writer a moment.
            time.sleep(0.2)
            holder = _read(path)
            if holder is None and _is_empty(path):
                path.unlink(missing_ok=True)
                console.print(f"removed an empty lock file in {out} (left by a run that could not write it)")
                continue
            if holder is None:
                raise MMTuneError(f"{out} has a lock file that cannot be read", where=str(path),
                                  fix=f"if no mmtune run uses {out}, delete {path} and start again")
        if not isinstance(holder, dict):
            raise MMTuneError(f"{out} has a lock file that is not mmtune's", where=str(path),
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


def _remove_dead_temporaries(out: Path) -> None:
    """A run killed between writing its lock's temporary file and removing it leaves `.mmtune.lock.PID.N.tmp`;
    those of processes gone from this host are removed (they are never the lock itself)."""
    if not out.is_dir():
        return
    for p in out.glob(f"{LOCK_NAME}.*.tmp"):
        pid = p.name[len(LOCK_NAME) + 1:].split(".")[0]
        if pid.isdigit() and not _alive(int(pid)):
            p.unlink(missing_ok=True)


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def release(path: Path) -> None:
    holder = _read(path)
    if isinstance(holder, dict) and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
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
