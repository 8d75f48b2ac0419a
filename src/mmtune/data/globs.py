"""A data source given as a glob pattern: `data.train: shards/part-*.jsonl`, `data/**/*.parquet`.

Shards rarely carry a split's name (`part-00001.jsonl`, `chunk_07.parquet`, a Spark job's output), so a folder of
them is not a split mmtune can find by name, and datasets' `data_files` patterns and axolotl's `path:` take a
pattern. The matching files are read in name order by the same readers as one file, each record named by its own
file:line; relative media paths resolve from the pattern's folder (the part before its first wildcard).

A pattern that matches nothing, or a file that is not a data file (an image, a README), is an error naming it: a
pattern is never read partly.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from ..errors import DataError

WILDCARDS = "*?["


def is_pattern(path_s: str) -> bool:
    """A spec that is a glob pattern: it holds a wildcard and no file or folder of that literal name exists."""
    return any(c in path_s for c in WILDCARDS) and not Path(path_s).expanduser().exists()


def pattern_root(path_s: str) -> Path:
    """The folder a pattern searches: its path up to the first part holding a wildcard."""
    parts = Path(os.path.expanduser(path_s)).parts
    fixed = []
    for part in parts:
        if any(c in part for c in WILDCARDS):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def pattern_files(path_s: str, where: str) -> list[Path]:
    """The data files a pattern matches, in name order; an error when it matches none, or matches a file that
    holds no records (`**` searches sub-folders)."""
    from .compressed import inner_suffix
    from .local_readers import ARCHIVE_FIX, FILE_READERS, is_archive

    found = sorted(Path(p) for p in glob.glob(os.path.expanduser(path_s), recursive=True))
    files = [p for p in found if p.is_file()]
    if not files:
        raise DataError(f"the pattern {path_s!r} matches no file (searched from {pattern_root(path_s)})", where=where,
                        fix="check the folder and the wildcard; `**` matches sub-folders (data/**/*.jsonl)")
    other = [p for p in files if inner_suffix(p) not in FILE_READERS]
    if other:
        raise DataError(f"the pattern {path_s!r} matches {len(other)} file(s) that hold no records, first "
                        f"{other[0]}", where=where,
                        fix="narrow the pattern to the data files (e.g. *.jsonl, *.parquet)" + (
                            ARCHIVE_FIX if is_archive(other[0]) else ""))
    return files


def pattern_rows(path_s: str, where: str):
    """(the pattern's folder, rows of every matching file in name order), read lazily file by file."""
    from itertools import chain

    from .local_readers import reader_for

    files = pattern_files(path_s, where)
    return pattern_root(path_s), chain.from_iterable(reader_for(f)(f) for f in files)
