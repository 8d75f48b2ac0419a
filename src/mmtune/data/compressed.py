"""Compressed data files (`train.jsonl.gz`, `data.json.bz2`, `rows.csv.xz`, `train.jsonl.zst`), as the Hub and
`datasets` keep text data: read by the reader of the suffix under the compression one, decompressed as read.

`datasets` reads them transparently, so a set exported or downloaded that way reached mmtune as an "unknown
file type '.gz'". gzip, bz2 and xz come with Python; zstd needs the `zstandard` package, imported only when such
a file is read. A damaged compressed stream (a cut download) is one error naming the file and how far it was
read, never a traceback from inside the decompressor.
"""

from __future__ import annotations

import io
from pathlib import Path

from ..errors import DataError

COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")
# What each decompressor raises on a damaged stream (EOFError: a stream cut before its end marker).
_DAMAGED = (OSError, EOFError, ValueError)


def compression_of(path: Path) -> str | None:
    suffix = path.suffix.lower()
    return suffix if suffix in COMPRESSIONS else None


def inner_suffix(path: Path) -> str:
    """The data suffix a reader is picked by: `.jsonl` for both `a.jsonl` and `a.jsonl.gz`."""
    return (Path(path.stem) if compression_of(path) else path).suffix.lower()


def _zstd_open(path: Path):
    try:
        import zstandard
    except ImportError:
        raise DataError(f"{path} is zstd-compressed and the zstandard package is not installed", where=str(path),
                        fix=f"pip install zstandard (the mmtune[zstd] extra), or decompress it first: "
                            f"zstd -d {path.name}") from None
    return zstandard.open(path, "rb")


def open_bytes(path: Path):
    """`path` opened for reading bytes, decompressed when its suffix says so."""
    kind = compression_of(path)
    if kind is None:
        return open(path, "rb")
    if kind == ".zst":
        return _zstd_open(path)
    import bz2
    import gzip
    import lzma

    return {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}[kind](path, "rb")


def damaged(path: Path, e: BaseException, where: str) -> DataError:
    """The error for a compressed file whose stream breaks off or is not of its kind."""
    return DataError(f"{path} is not a readable {compression_of(path)} file ({type(e).__name__}: {e})", where=where,
                     fix=f"the file is cut or not {compression_of(path)}-compressed: download or compress it again "
                         "(the decompressor must read it to its end)")


def lines(path: Path):
    """The lines of `path` as bytes; a damaged compressed stream is a DataError naming the last line read."""
    n = 0
    f = open_bytes(path)
    try:
        with f:
            for line in f:
                n += 1
                yield line
    except _DAMAGED as e:
        if compression_of(path) is None:
            raise
        raise damaged(path, e, f"{path}:{n + 1}") from None  # the line it broke in


def read_bytes(path: Path) -> bytes:
    try:
        with open_bytes(path) as f:
            return f.read()
    except _DAMAGED as e:
        if compression_of(path) is None:
            raise
        raise damaged(path, e, str(path)) from None


def open_text(path: Path, **kw):
    """`path` as text (kw: io.TextIOWrapper's encoding / errors / newline), decompressed when it is compressed;
    a damaged stream surfaces as the decompressor's error from the reads (see `lines` for line files)."""
    if compression_of(path) is None:
        return open(path, **kw)
    return io.TextIOWrapper(open_bytes(path), **kw)
