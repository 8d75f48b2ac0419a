"""`datasets`' cache folder, where it cannot be written: a read-only mount, a full disk, another user's folder.

`datasets` writes into its cache (HF_DATASETS_CACHE, by default HF_HOME/datasets) even for a local folder and
offline: a builder makes its folder there, `load_dataset` its Arrow table and lock files. A container whose
HF_HOME is a read-only shared mount, a cluster home over quota, or a full disk then stops deep inside `datasets`
with "OSError: [Errno 30] Read-only file system" or "[Errno 28] No space left on device", far from the cause
(https://github.com/huggingface/datasets/issues/7029, https://github.com/pytorch/pytorch/pull/188880).
mmtune reads the layout of a local repository with a throw-away cache (repo_files.py), so only `datasets`' own
reading (a Hub id not yet cached, image folders) needs the folder; there such an error says which folder and what
to set.
"""

from __future__ import annotations

import errno

# Errors of a folder that cannot be written (read-only, no permission, full, over quota, a file in its path).
UNWRITABLE = {errno.EROFS: "is on a read-only file system", errno.EACCES: "cannot be written by this user",
              errno.EPERM: "cannot be written by this user", errno.ENOSPC: "is on a full disk",
              errno.EDQUOT: "is over its disk quota", errno.ENOTDIR: "is not a folder (a file is in its path)"}


def unwritable_cache(e: OSError, where: str):
    """A DataError saying that `datasets`' cache folder cannot be written, or None for any other OSError."""
    if getattr(e, "errno", None) not in UNWRITABLE:
        return None
    import datasets

    from ..errors import DataError

    cache = str(datasets.config.HF_DATASETS_CACHE)
    return DataError(f"datasets must write its cache to read {where}, and {e.filename or cache} "
                     f"{UNWRITABLE[e.errno]} ({e.strerror}); datasets' cache is {cache}", where=where,
                     fix="HF_DATASETS_CACHE=/a/writable/folder on a local disk with free space (it holds the tables "
                         "datasets builds; HF_HOME's models may stay read-only), or export the records as JSONL "
                         "and give that file")
