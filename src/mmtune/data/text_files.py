"""Plain text files as raw-text documents (data.format=text): one `.txt` file is one document (a book, an
article, a source file), and a folder of them is a corpus. Each file is one row `{"text", "id"}`, its id the
file's path inside the folder given."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .formats import BadRecord

SUFFIX = ".txt"


def rows_txt(path: Path, root: Path | None = None) -> Iterator[tuple[str, object]]:
    from .compressed import read_bytes

    where = str(path)
    raw = read_bytes(path)
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        yield where, BadRecord("bad encoding", "the file is UTF-16 text, not UTF-8", where,
                               f"re-save it as UTF-8: iconv -f utf-16 -t utf-8 {path.name} > {path.stem}.utf8.txt")
        return
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        yield where, BadRecord("bad encoding", f"the file is not valid UTF-8 (byte {e.start})", where,
                               "re-save it as UTF-8 (e.g. iconv -f latin1 -t utf-8)")
        return
    rid = path.relative_to(root).as_posix() if root is not None else path.name
    yield where, {"text": text, "id": rid}


def txt_files(folder: Path, split: str) -> list[Path]:
    """The .txt documents of a folder for `split`: those under its sub-folder named after the split (train/,
    val/, ...) when it has one, else every .txt file under it (searched recursively), in path order."""
    from .splits import split_candidates

    for name in split_candidates(split):
        sub = folder / name
        if sub.is_dir():
            found = sorted(sub.rglob("*" + SUFFIX))
            if found:
                return found
    return sorted(p for p in folder.rglob("*" + SUFFIX) if p.is_file())


def folder_rows(folder: Path, files: list[Path]) -> Iterator[tuple[str, object]]:
    for f in files:
        yield from rows_txt(f, folder)
