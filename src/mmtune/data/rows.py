"""A source spec -> (base folder for relative media, rows as (where, row-or-BadRecord)): which reader reads it.

`iter_rows` reads a spec whole: a Hub id (hub.py), a published dataset's folder (published.py), a save_to_disk
folder, a dataset repository folder, a folder's split files or one file (local_readers.py). `stream_rows`
reads the same specs lazily for data.streaming.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ..errors import DataError
from .compressed import inner_suffix
from .globs import is_pattern, pattern_rows
from .local_readers import ARCHIVE_FIX, is_archive, reader_for, regular_file, rows_datasets
from .splits import FILE_SUFFIXES, split_candidates
from .text_files import folder_rows, txt_files


def iter_rows(spec: str, split: str, parts: list[str] | None = None,
              subset: str | None = None) -> tuple[Path, Iterator[tuple[str, object]]]:
    """(base folder for relative media, rows as (where, row-or-BadRecord)). A folder may hold a split
    in several files (ChartQA's human + augmented parts): their rows follow each other in name order."""
    from itertools import chain

    from .hub import hub_rows, is_dataset_repo, is_hub_id, repo_rows
    from .published import split_files

    path_s, _, explicit = spec.partition("::")
    path = Path(path_s).expanduser()
    if explicit:
        split = explicit
    if is_hub_id(path_s):
        return hub_rows(path_s, split, subset)
    if is_pattern(path_s):  # shards/part-*.jsonl: every match, in name order (data/globs.py)
        return pattern_rows(path_s, spec)
    if not path.exists():
        raise DataError(f"data source {str(path)!r} does not exist", where=spec,
                        fix="give a JSONL/JSON/parquet/CSV/Arrow file, a dataset folder, a Hub id ORG/NAME, "
                            "or synthetic:counting")
    if path.is_dir():
        from .published import fsc147_rows, is_fsc147

        if is_fsc147(path):
            return path, fsc147_rows(path, split)
        if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
            return path, rows_datasets(path, split)
        if subset or is_dataset_repo(path, declared_only=True):  # the repository's README declares its layout
            return path, repo_rows(path, split, subset)
        files = split_files(path, split_candidates(split), parts)
        if not files and is_dataset_repo(path):  # data/train-00000-of-00001.parquet, as the Hub lays it out
            return path, repo_rows(path, split)
        if not files and (txt := txt_files(path, split)):  # a corpus of raw-text documents (data/text_files.py)
            return path, folder_rows(path, txt)
        if not files:
            found = sorted(p.name for p in path.iterdir() if p.suffix in FILE_SUFFIXES)
            archives = sorted(p.name for p in path.iterdir() if is_archive(p))
            raise DataError(f"{path} has no {split!r} split", where=str(path),
                            fix=f"files found: {', '.join(found) or '(none)'}; name one ({'/'.join(split_candidates(split))}"
                                f" + .jsonl/.json/.parquet) or point at the file itself" + (
                                    f"; archives found: {', '.join(archives[:3])}{' ...' if len(archives) > 3 else ''}"
                                    + ARCHIVE_FIX if archives else ""))
        if len(files) > 1:
            return files[0].parent, chain.from_iterable(reader_for(f)(f) for f in files)
        path = files[0]
    return path.parent, reader_for(path)(path)


def stream_rows(spec: str, split: str) -> tuple[Path, Iterator[tuple[str, object]]]:
    """(base folder for relative media, rows as (where, row-or-BadRecord)), read lazily."""
    from .hub import _load, cached_snapshot, dataset_rows, is_hub_id, local_repo_rows

    path_s, _, explicit = spec.partition("::")
    split = explicit or split
    if is_hub_id(path_s):
        snap = cached_snapshot(path_s)
        if snap is not None:
            return snap, local_repo_rows(snap, split, None, path_s, streaming=True)
        return Path.cwd(), dataset_rows(_load(path_s, None, path_s, streaming=True), split, path_s)
    if is_pattern(path_s):
        return pattern_rows(path_s, spec)  # file by file, each read lazily
    path = Path(path_s).expanduser()
    if not path.exists():
        raise DataError(f"data source {str(path)!r} does not exist", where=spec,
                        fix="give a JSONL/parquet/CSV file, a dataset folder or a Hub id ORG/NAME")
    if path.is_dir():
        if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
            return path, rows_datasets(path, split)  # memory-mapped Arrow: a row is read when it is drawn
        return path, local_repo_rows(path, split, None, str(path), streaming=True)
    regular_file(path)
    if inner_suffix(path) not in (".jsonl", ".csv", ".parquet"):
        raise DataError(f"data.streaming cannot read {path.name} as a stream ({path.suffix or 'no suffix'})",
                        where=spec, fix="a .json list is read whole: convert it to JSONL (one record per line), "
                                        "or set data.streaming=false")
    return path.parent, reader_for(path)(path)  # lazily, line by line (a .jsonl.gz decompressed as read)
