"""What the training data was when a run read it, so a resume can tell that it changed.

The config names the data (`data.train`), but the files behind a name can be edited in place, replaced,
or moved under a symlink, and `data.media_root` can point elsewhere: a resume would then continue a run
on other records at the same data position, with nothing said. At start every training source that is
a local file or folder is fingerprinted -- per file its resolved path, size, modification time, the
sha256 of its first and last 64 KiB (the first and last records of a line-based file; any edit near
either end of a columnar one), and, while the files hashed stay under FULL_BUDGET bytes, the sha256 of
the whole file -- and so is every media root (resolved path, whether it exists). The fingerprint goes
into each checkpoint's meta.json; resume_guard compares it with the data as it is now.

Where the whole file is hashed, its content decides: a file rewritten with the same bytes (a preparation
script run again, a copy that did not keep times) is the same data whatever its modification time. Past
the budget (hashing gigabytes at every start costs minutes), size, first/last records and the
modification time decide, so an edit in the middle of a large file is still caught by its time.

Cost: a stat and two 64 KiB reads per file plus up to FULL_BUDGET bytes read, for at most MAX_FILES
record files per source (a folder's files named as records are: JSONL, JSON, parquet, Arrow, CSV...; a
folder of more is fingerprinted on its first MAX_FILES by name plus its file count).
Media files themselves are not hashed (there can be millions): they are named by the records, whose
files are.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..data.globs import is_pattern, pattern_files

EDGE = 64 * 1024
MAX_FILES = 2000
FULL_BUDGET = 256 * 2**20
# The files of a dataset folder that hold records (a folder may also hold its images: media, not hashed).
RECORD_SUFFIXES = frozenset({".jsonl", ".json", ".parquet", ".arrow", ".csv", ".tsv", ".txt", ".yaml", ".yml"})


def _sources(cfg) -> list[tuple[str, str, str | None]]:
    """(label, spec, media_root) of every training source the config names."""
    data = cfg.data
    if isinstance(data.train, list):
        return [(f"data.train[{s.name or i}]", s.path, s.media_root or data.media_root)
                for i, s in enumerate(data.train)]
    return [("data.train", data.train, data.media_root)] if data.train else []


def _edge_hashes(path: Path, size: int) -> tuple[str, str]:
    with open(path, "rb") as f:
        head = f.read(EDGE)
        if size > EDGE:
            f.seek(max(size - EDGE, EDGE))
            tail = f.read(EDGE)
        else:
            tail = head
    return hashlib.sha256(head).hexdigest()[:32], hashlib.sha256(tail).hexdigest()[:32]


def _file(path: Path, budget: list[int]) -> dict:
    """One file's entry; `budget[0]`: bytes still allowed for whole-file hashes (shared by the fingerprint)."""
    try:
        st = path.stat()
        head, tail = _edge_hashes(path, st.st_size)
        entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "head": head, "tail": tail}
        if st.st_size <= budget[0]:
            budget[0] -= st.st_size
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
            entry["sha256"] = h.hexdigest()[:32]
    except OSError as e:
        return {"error": e.strerror or e.__class__.__name__}
    return entry


def fingerprint(cfg) -> dict:
    """{"files": {resolved path: {size, mtime_ns, head, tail}}, "sources": {label: {...}},
    "media_roots": {label: {path, exists}}} for the training data `cfg` names."""
    files, sources, roots = {}, {}, {}
    budget = [FULL_BUDGET]
    for label, spec, media_root in _sources(cfg):
        path_s = spec.partition("::")[0]
        if path_s.startswith("synthetic:"):
            sources[label] = {"kind": "synthetic"}  # generated from the config alone: compared there
        elif is_pattern(path_s):  # shards/part-*.jsonl: the files it matches now (a shard added or gone is a change)
            found = pattern_files(path_s, label)
            for q in found[:MAX_FILES]:
                files[str(q.resolve())] = _file(q, budget)
            sources[label] = {"kind": "pattern", "pattern": path_s, "files": len(found)}
        else:
            p = Path(path_s).expanduser()
            if p.is_file():
                files[str(p.resolve())] = _file(p, budget)
                sources[label] = {"kind": "file", "path": str(p.resolve())}
            elif p.is_dir():
                found = sorted(q for q in p.rglob("*") if q.suffix.lower() in RECORD_SUFFIXES and q.is_file())
                for q in found[:MAX_FILES]:
                    files[str(q.resolve())] = _file(q, budget)
                sources[label] = {"kind": "folder", "path": str(p.resolve()), "files": len(found)}
            else:  # a Hub id or a dataset_info name: read through its own cache, compared by name
                sources[label] = {"kind": "named", "spec": spec}
        if media_root:
            r = Path(media_root).expanduser()
            roots[label] = {"path": str(r.resolve()), "exists": r.is_dir()}
    if cfg.data.dataset_info:
        p = Path(cfg.data.dataset_info).expanduser()
        p = p / "dataset_info.json" if p.is_dir() else p
        if p.is_file():
            files[str(p.resolve())] = _file(p, budget)
    return {"version": 1, "files": files, "sources": sources, "media_roots": roots}


def _when(ns) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9)) if isinstance(ns, int) else "?"


def _file_change(old: dict, new: dict) -> str:
    """What differs between two entries of one file, in words; "" when it is the same data."""
    if "error" in new:
        return f"cannot be read now ({new['error']})"
    whole = "sha256" in old and "sha256" in new
    if whole and old["sha256"] == new["sha256"] and old.get("size") == new.get("size"):
        return ""  # the same bytes: a new modification time alone (rewritten, copied) changes nothing
    what = []
    if old.get("size") != new.get("size"):
        what.append(f"{old.get('size')} -> {new.get('size')} bytes")
    if old.get("head") != new.get("head"):
        what.append("its first records differ")
    if old.get("tail") != new.get("tail"):
        what.append("its last records differ")
    if whole and not what:
        what.append("records between its first and last differ (same size)")
    if not whole and old.get("mtime_ns") != new.get("mtime_ns"):
        what.append(f"modified {_when(new.get('mtime_ns'))} (was {_when(old.get('mtime_ns'))})"
                    + ("; same size and first/last records: edited in place, or copied or touched (too large to "
                       "hash whole at every start)" if not what else ""))
    return ", ".join(what)


def changes(saved: dict | None, now: dict) -> dict[str, tuple]:
    """{what changed: (then, now)} between two fingerprints, in words; {} when the same or when the
    checkpoint has none (written before fingerprints: nothing to compare)."""
    if not isinstance(saved, dict) or saved.get("version") != 1:
        return {}
    out: dict[str, tuple] = {}
    old_files, new_files = saved.get("files") or {}, now.get("files") or {}
    for path in sorted(set(old_files) | set(new_files)):
        a, b = old_files.get(path), new_files.get(path)
        if a is None:
            out[f"data file {path}"] = ("absent", "added")
        elif b is None:
            out[f"data file {path}"] = ("read", "gone (or no longer read)")
        elif a != b and isinstance(a, dict) and (what := _file_change(a, b)):
            out[f"data file {path}"] = ("as read", what)
    for kind in ("sources", "media_roots"):
        old, new = saved.get(kind) or {}, now.get(kind) or {}
        for label in sorted(set(old) | set(new)):
            a, b = old.get(label), new.get(label)
            if a != b:
                name = f"{label} {'media root' if kind == 'media_roots' else 'source'}"
                out[name] = (_where(a), _where(b))
    return out


def _where(entry) -> str:
    if not isinstance(entry, dict):
        return "none"
    if "exists" in entry:
        return entry["path"] + ("" if entry["exists"] else " (missing)")
    if entry.get("kind") == "pattern":
        return f"{entry['pattern']} ({entry.get('files')} files)"
    if entry.get("kind") == "folder":
        return f"{entry['path']} ({entry.get('files')} files)"
    return entry.get("path") or entry.get("spec") or entry.get("kind", "?")
