"""Where an export is written before it takes its place: `.NAME.partial-HOST-PID-XXXX` beside --out.

The export is complete before it is renamed to --out, so a killed `mmtune export` never leaves a half-written
folder under that name. It did leave its staging folder, hidden, holding what was written so far (a merged 7B
model: up to 15 GB), and nothing ever removed it. Its name now carries the writer's host and PID, so the next export
to the same place removes the leftovers of writers gone from this host; a folder of another host (a shared disk) or
of an export still running is left alone.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path


def _safe_host() -> str:
    return "".join(c if c.isalnum() else "_" for c in socket.gethostname()) or "host"


def make_staging(out: Path) -> Path:
    """A fresh staging folder beside `out`, named for this host and process."""
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{_safe_host()}-{os.getpid()}-", dir=out.parent))


def remove_dead_staging(out: Path) -> list[tuple[Path, int]]:
    """Remove the staging folders of exports to `out` whose process is gone from this host; returns each with
    the bytes it held."""
    from ..train.lock import _alive

    prefix = f".{out.name}.partial-{_safe_host()}-"
    removed = []
    if not out.parent.is_dir():
        return removed
    for p in out.parent.glob(f".{out.name}.partial-*"):
        rest = p.name[len(prefix):] if p.name.startswith(prefix) else ""
        pid = rest.split("-")[0]
        if not p.is_dir() or not pid.isdigit() or _alive(int(pid)):
            continue
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())
        shutil.rmtree(p, ignore_errors=True)
        removed.append((p, size))
    return removed
