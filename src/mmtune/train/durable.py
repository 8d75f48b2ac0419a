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
# What mmtune itself adds to a checkpoint after its save, and never reads on resume: `mmtune eval`'s
# eval.json, `mmtune export`'s default output folders and their staging folders (export.py: .NAME.partial-*,
# left by a killed export). Any other file the manifest does not list fails.
LATER = ("eval.json", "export", "export-merged")
LATER_STAGING = (".export.partial-", ".export-merged.partial-")
_CHUNK = 1 << 20


def fmt_bytes(n: int | float) -> str:
    """A byte count in the unit that shows it: 512 B, 37.5 KiB, 4.20 MiB, 12.3 GiB (never "0.00 GiB"
    for a disk that has a few MiB left -- the figure the user needs to act on)."""
    n = float(n)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            v = n / size
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{int(n)} B"


# How a full disk reads where it does not come as an OSError: safetensors and the tokenizers library
# write from Rust and report the OS error as text ("No space left on device (os error 28)").
_FULL_TEXT = ("No space left on device", "os error 28", "Disk quota exceeded", "os error 122", "StorageFull",
              "QuotaExceeded")


def is_disk_full(e: BaseException) -> bool:
    import errno

    if isinstance(e, OSError):
        return e.errno in (errno.ENOSPC, errno.EDQUOT)
    return any(t in str(e) for t in _FULL_TEXT)


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
    """None when the manifest lists exactly the folder's files, each with its size and checksum; else
    what is wrong, in words (never an exception: a rewritten manifest is damage like any other).

    A file the manifest does not list is damage too: nothing is written into a checkpoint after its
    manifest, so an unlisted file was put there later (a planted state file, say); only what mmtune
    adds later itself (LATER) is passed over. A folder without a
    manifest was written before manifests existed (it holds `state.pt`, the earlier format): accepted as
    it is; a folder of the current format (`state.json`) always has one, so there its absence is damage."""
    path = folder / MANIFEST
    if not path.exists():
        return f"{MANIFEST} is missing (every checkpoint of this format has one)" \
            if (folder / "state.json").exists() else None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        return f"{MANIFEST} is unreadable ({e.__class__.__name__})"
    problem = _manifest_shape(doc)
    if problem:
        return f"{MANIFEST} {problem}"
    files = doc["files"]
    unlisted = sorted(rel for p in _files(folder) if (rel := p.relative_to(folder).as_posix()) not in files
                      and rel.split("/")[0] not in LATER and not rel.startswith(LATER_STAGING))
    if unlisted:
        return f"{unlisted[0]} is not in {MANIFEST}" + (f" (and {len(unlisted) - 1} more)" if len(unlisted) > 1 else "") \
            + ": added after the save"
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


def _manifest_shape(doc) -> str | None:
    """What is wrong with a parsed manifest's structure, or None: {"version": 1, "files": {relative path:
    {"size": int >= 0, "sha256": 64 hex digits}}}, every path inside the folder."""
    if not isinstance(doc, dict):
        return f"is a JSON {type(doc).__name__}, not an object"
    if doc.get("version") != 1:
        return f"has version {doc.get('version')!r}, not 1"
    files = doc.get("files")
    if not isinstance(files, dict):
        return "has no 'files' object" if files is None else f"'files' is a {type(files).__name__}, not an object"
    for rel, want in files.items():
        parts = rel.split("/")
        if not rel or rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts) or rel == MANIFEST:
            return f"lists {rel!r}, not a path inside the checkpoint"
        if not isinstance(want, dict):
            return f"entry {rel!r} is a {type(want).__name__}, not {{size, sha256}}"
        size, digest = want.get("size"), want.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return f"entry {rel!r} has size {size!r}, not a byte count"
        if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            return f"entry {rel!r} has sha256 {str(digest)[:80]!r}, not 64 hex digits"
    return None
