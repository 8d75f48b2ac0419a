"""Data where it lives, read through `datasets`' own loaders: a Hub id (`ORG/NAME[::split]`, from the
local Hub cache first, so it works offline), a local dataset repository (a folder laid out the way the
Hub lays datasets out: `data/train-*.parquet`, a README's `configs:`, split sub-folders), and Arrow files.

A Hub id is a spec that is not a local path and reads `ORG/NAME` (no file suffix). It is looked up in the
Hub cache (`huggingface_hub.snapshot_download(local_files_only=True)`, the folder `hf download
--repo-type dataset ORG/NAME` fills) and read as a local repository; when it is not cached and the
process is online it is loaded by id (downloaded into that cache). Offline (`HF_DATASETS_OFFLINE=1` or
`HF_HUB_OFFLINE=1`) with nothing cached is an error naming the id and the command that fetches it.

Media columns come back as `{bytes, path}` dicts (decoding audio/video inside `datasets` needs torchcodec;
our media loader handles both forms); relative media paths resolve against the repository folder.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from ..errors import DataError
from .compressed import inner_suffix

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".arrow", ".txt", ".tsv")


def is_hub_id(path_part: str) -> bool:
    """`ORG/NAME` that is not a local path and has no data-file suffix."""
    return (bool(HUB_ID.match(path_part)) and not Path(path_part).expanduser().exists()
            and not path_part.lower().endswith(DATA_SUFFIXES))


def offline() -> bool:
    return any(os.environ.get(k, "").lower() in ("1", "true", "yes", "on") for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


def cached_snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The Hub cache's folder for a dataset repository, or None when it is not cached."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, repo_type="dataset", revision=revision, local_files_only=True))
    except Exception:  # LocalEntryNotFoundError and friends: not cached (never a network call here)
        return None


def is_dataset_repo(folder: Path, declared_only: bool = False) -> bool:
    """A folder laid out for `datasets.load_dataset(folder)`: a README declaring `configs:` (the
    repository says how to read it), or (unless `declared_only`) a `data/` folder of data files."""
    readme = folder / "README.md"
    if readme.is_file() and re.search(r"^configs:", readme.read_text(encoding="utf-8", errors="replace")[:20000], re.M):
        return True
    data = folder / "data"
    return not declared_only and data.is_dir() and any(inner_suffix(p) in DATA_SUFFIXES  # (data/train.jsonl.gz too)
                                                       for p in data.rglob("*") if p.is_file())


def _load(source: str, subset: str | None, where: str, streaming: bool = False):
    """datasets.load_dataset, its failures as DataErrors; `streaming`: an iterable read as it is drawn
    (data.streaming, data/streaming.py)."""
    import datasets

    try:
        return datasets.load_dataset(source, subset, streaming=streaming)
    except datasets.exceptions.DatasetGenerationError as e:  # its cause is pyarrow's, deep in a table cast
        cause = e.__cause__ or e
        raise DataError(f"datasets could not build {where}'s table ({type(cause).__name__}: {str(cause)[:300]})",
                        where=where, fix="a column whose type varies between records or files; export the records "
                                         "as JSONL and give that file (mmtune reads each record on its own)") from None
    except (FileNotFoundError, ValueError, datasets.exceptions.DatasetNotFoundError) as e:
        raise DataError(f"datasets could not {'stream' if streaming else 'load'} {where} "
                        f"({type(e).__name__}: {str(e)[:300]})", where=where,
                        fix="check the id / folder and its data files; a subset (config) is chosen with "
                            "data.dataset_info's `subset`") from None
    except ConnectionError as e:
        raise DataError(f"{where} is not in the Hub cache and the Hub cannot be reached ({str(e)[:200]})",
                        where=where, fix=f"fetch it once online: hf download --repo-type dataset {where}") from None
    except OSError as e:  # its cache folder cannot be written (read-only HF_HOME, a full disk)
        from .datasets_cache import unwritable_cache

        err = unwritable_cache(e, where)
        if err is None:
            raise
        raise err from None


def dataset_rows(ds, split: str, label: str) -> Iterator[tuple[str, object]]:
    """Rows of a Dataset, or of the split of a DatasetDict found under its aliases."""
    import datasets

    from .splits import pick_split

    if isinstance(ds, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        name = pick_split(list(ds.keys()), split, label)
        ds, label = ds[name], f"{label}[{name}]"
    for col, feat in (ds.features or {}).items():
        undecoded = _undecoded(feat)
        if undecoded is not None:
            ds = ds.cast_column(col, undecoded)
    for n, row in enumerate(ds):
        yield f"{label}:row {n}", row


def _undecoded(feat):
    """The feature with `datasets`' own media decoding off (None when there is none): media arrive as
    {bytes, path} and are decoded by mmtune's loader, one record at a time. Decoded by `datasets`, one
    corrupt image stops the iteration of the whole split with PIL's exception. Lists of media too (TRL's
    `images` column is a List(Image))."""
    name = type(feat).__name__
    if name in ("Image", "Audio", "Video"):
        return type(feat)(decode=False) if getattr(feat, "decode", False) else None
    inner = getattr(feat, "feature", None)
    if name in ("List", "Sequence", "LargeList") and inner is not None:
        got = _undecoded(inner)
        return type(feat)(got) if got is not None else None
    return None


def hub_rows(repo_id: str, split: str, subset: str | None = None) -> tuple[Path, Iterator[tuple[str, object]]]:
    """(base folder for relative media, rows) of a Hub dataset, from the cache when it is there."""
    snap = cached_snapshot(repo_id)
    if snap is not None:
        return snap, local_repo_rows(snap, split, subset, repo_id)
    if offline():
        raise DataError(f"dataset {repo_id!r} is not in the Hub cache, and the Hub is off (HF_DATASETS_OFFLINE / "
                        "HF_HUB_OFFLINE)", where=repo_id,
                        fix=f"fetch it once online: hf download --repo-type dataset {repo_id}; or give a local path "
                            "(a relative path that does not exist reads as a Hub id)")
    ds = _load(repo_id, subset, repo_id)
    return Path.cwd(), dataset_rows(ds, split, repo_id)


def repo_rows(folder: Path, split: str, subset: str | None = None) -> Iterator[tuple[str, object]]:
    return local_repo_rows(folder, split, subset, str(folder))


def local_repo_rows(folder: Path, split: str, subset: str | None, where: str,
                    streaming: bool = False) -> Iterator[tuple[str, object]]:
    """A local repository's (or cached snapshot's) split: its data files through mmtune's own readers when they
    are all files those read (data/repo_files.py: no table whose columns must agree), else `datasets`' loader."""
    from .repo_files import rows_of, split_files

    files = split_files(str(folder), subset, split, where)
    if files is not None:
        return rows_of(files)
    return dataset_rows(_load(str(folder), subset, where, streaming), split, where)


def arrow_rows(path: Path) -> Iterator[tuple[str, object]]:
    """One `.arrow` file (a `datasets` cache or save_to_disk shard)."""
    import datasets

    try:
        ds = datasets.Dataset.from_file(str(path))
    except Exception as e:  # pyarrow raises its own error kinds for a file that is not Arrow
        raise DataError(f"{path} is not an Arrow file datasets can read ({type(e).__name__}: {str(e)[:200]})",
                        where=str(path), fix="give a file written by datasets (save_to_disk shard or cache)") from None
    return dataset_rows(ds, "train", str(path))
