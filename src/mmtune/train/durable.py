"""Durable folders on disk: fsync every file, a manifest of sizes and checksums written last, and its check.

Why: a rename is atomic, but without fsync a power loss or a preempted VM can leave the renamed
folder with zero-byte or truncated files; without checksums, random bytes in a weight file load
silently and the damage shows up steps later as a "data" problem.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MANIFEST = "manifest.json"
_CHUNK = 1 << 20


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (new files, renames) durable. Some filesystems refuse fsync on a
    directory (EINVAL); their entries are then as durable as that filesystem makes them."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    for dirpath, _, files in os.walk(folder):
        for name in files:
            fsync_file(Path(dirpath) / name)
        fsync_dir(Path(dirpath))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: Path) -> None:
    """manifest.json = {relative path: {size, sha256}} of every file, written and fsynced last."""
    entries = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": sha256(p)}
               for p in _files(folder)}
    path = folder / MANIFEST
    with open(path, "w") as f:
        json.dump({"version": 1, "files": entries}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(folder)


def verify_manifest(folder: Path) -> str | None:
    """None when every file listed is there with its size and checksum; else what is wrong, in words.

    A folder without a manifest was written before manifests existed: accepted as it is."""
    path = folder / MANIFEST
    if not path.exists():
        return None
    try:
        files = json.loads(path.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{MANIFEST} is unreadable ({e.__class__.__name__})"
    for rel, want in files.items():
        p = folder / rel
        if not p.is_file():
            return f"{rel} is missing"
        size = p.stat().st_size
        if size != want["size"]:
            return f"{rel} has {size} bytes, {want['size']} were written" + (" (zero-byte file)" if size == 0 else "")
        if sha256(p) != want["sha256"]:
            return f"{rel} does not match its checksum (the file was changed or damaged on disk)"
    return None
