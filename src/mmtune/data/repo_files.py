"""A local dataset repository's split read file by file with mmtune's own readers, not through `datasets`' table.

`datasets.load_dataset` turns a repository's JSON / JSONL / CSV files into one Arrow table, so every column must
have one type in every row and every file. Chat data rarely does: a `content` that is a string in one message and
a list of parts in the next, a `loss` key on some turns, one shard with a column the other lacks. Depending on
the mix, `datasets` stops with a traceback from inside pyarrow ("JSON parse error: Column(/messages/[]/content)
changed from string to array", "Couldn't cast array of type ...", DatasetGenerationError), or (datasets 5) stores
the column as JSON text and parses every string back, so an answer "2" or "true" comes out as a number or a
boolean and the record is refused as the user's mistake. The same records in one file are read correctly.

So the split's files are found as `datasets` finds them (`load_dataset_builder`: the README's `configs:`,
`data/train-0000X-of-0000N.parquet`, split names and globs, without building any table, its cache a throw-away
folder), and when every one is a file mmtune reads (JSONL / JSON / CSV, compressed or not, parquet, Arrow), they are
read in order by mmtune's readers: each record on its own, a bad one counted at its file:line. Anything else
(image folders, scripts, remote files) is left to `datasets`.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DataError


def split_files(source: str, subset: str | None, split: str, where: str) -> list[Path] | None:
    """The local data files of `split` in the repository at `source` (a folder), in datasets' order, or None when
    they are not all files mmtune's readers take."""
    import tempfile

    import datasets

    from .compressed import compression_of, inner_suffix
    from .local_readers import FILE_READERS, TEXT_READERS
    from .splits import pick_split

    try:
        # A throw-away cache: the builder makes its folder there, and reading the layout writes nothing else, so a
        # read-only or full HF_DATASETS_CACHE does not stop a local repository (data/datasets_cache.py).
        with tempfile.TemporaryDirectory(prefix="mmtune-layout-") as cache:
            builder = datasets.load_dataset_builder(source, subset, cache_dir=cache)
    except (FileNotFoundError, ValueError, datasets.exceptions.DatasetNotFoundError) as e:
        raise DataError(f"datasets could not read the layout of {where} ({type(e).__name__}: {str(e)[:300]})",
                        where=where, fix="check the folder and its data files; a subset (config) is chosen with "
                                         "data.dataset_info's `subset`") from None
    files = getattr(builder.config, "data_files", None)
    if not files:
        return None  # a loading script or a builder without data files: datasets' own reading
    name = pick_split(list(files), split, where)
    paths = [Path(str(f)) for f in files[name]]
    for p in paths:
        suffix = inner_suffix(p)
        if not p.is_file() or suffix not in FILE_READERS or (compression_of(p) and suffix not in TEXT_READERS):
            return None
    return paths


def rows_of(paths: list[Path]):
    from itertools import chain

    from .local_readers import reader_for, rows_jsonl

    # a .json that is JSON Lines is read line by line, as datasets' JSON builder reads it (JSON Lines first,
    # one whole document only where that fails): many Hub sets ship JSON Lines under a .json name
    return chain.from_iterable((rows_jsonl if _json_lines(p) else reader_for(p))(p) for p in paths)


def _json_lines(path: Path) -> bool:
    """A `.json` file whose first non-blank line is a JSON object on its own: JSON Lines, as `datasets` reads it
    (a list's first line is `[`, a pretty-printed object's a lone `{`)."""
    import json

    from .compressed import inner_suffix, lines

    if inner_suffix(path) != ".json":
        return False
    try:
        for line in lines(path):
            if line.strip():
                return isinstance(json.loads(line.decode("utf-8-sig")), dict)
    except (ValueError, DataError):  # not one value on the line, not UTF-8, a damaged stream: the reader says so
        return False
    return False
