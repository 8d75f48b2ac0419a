"""Local data files read row by row: JSONL, JSON, parquet, CSV, Arrow, and a `datasets` save_to_disk folder.

Each reader yields (where, row-or-BadRecord): a line in another encoding, a line that is not JSON or a CSV
row with too many cells is one bad record (counted under data.on_bad_record), never a dead file; a file
that cannot be read at all is a DataError naming it. `FILE_READERS` picks the reader by suffix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from ..errors import DataError
from .compressed import compression_of, damaged, inner_suffix, lines, open_bytes, open_text, read_bytes
from .formats import BadRecord
from .hub import arrow_rows, dataset_rows
from .text_files import rows_txt


def parse_json_line(raw: bytes, where: str):
    """One JSONL line -> its value, or a BadRecord saying what is wrong with it (never an exception)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return BadRecord("bad encoding", f"line is not valid UTF-8 (byte {e.start}: {raw[e.start:e.start + 1]!r})",
                         where, "re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        return BadRecord("bad json", f"line is not valid JSON ({e.msg} at column {e.colno})", where,
                         "fix the line; JSONL holds one JSON object per line")
    except RecursionError:
        return BadRecord("bad json", "line is nested too deeply to be a record", where,
                         "a record is an object of a few levels (messages -> turns -> parts)")


UTF8_BOM = b"\xef\xbb\xbf"  # Windows tools (Notepad, Excel, PowerShell) start UTF-8 files with it


UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")  # Windows' "Unicode" (PowerShell's `>`, Notepad's old default)


def _not_utf16(path: Path, head: bytes) -> None:
    """A UTF-16 file is a whole-file problem: read as UTF-8 its lines split inside characters, and a count of
    bad lines would count neither the records nor the lines the user sees."""
    if head.startswith(UTF16_BOMS):
        raise DataError(f"{path} is UTF-16 text (it starts with a UTF-16 byte-order mark), not UTF-8", where=str(path),
                        fix=f"re-save it as UTF-8: iconv -f utf-16 -t utf-8 {path.name} > {path.stem}.utf8{path.suffix}")


def _not_an_array(path: Path, first: bytes) -> None:
    """A JSON array saved as .jsonl (one line, or pretty-printed over many): its records are not lines, so
    counting its lines as bad records would misstate how many records it holds."""
    if not first.lstrip(UTF8_BOM).lstrip().startswith(b"["):
        return
    try:
        data = json.loads(read_bytes(path).decode("utf-8-sig"))
    except (ValueError, RecursionError):  # not one JSON document: its lines are read as JSONL records
        return
    if isinstance(data, list):
        raise DataError(f"{path} holds one JSON array of {len(data)} item(s), not one record per line (JSONL)",
                        where=str(path), fix=f"rename it to {path.stem}.json (read as a list of records), or write "
                        "one JSON object per line")


def rows_jsonl(path: Path) -> Iterator[tuple[str, object]]:
    # Read bytes, decode per line: one line in another encoding is one bad record, not a dead file.
    started = False  # past the first non-blank line
    for n, line in enumerate(lines(path), start=1):  # (decompressed as read: train.jsonl.gz)
        if n == 1:
            _not_utf16(path, line)
            line = line[len(UTF8_BOM):] if line.startswith(UTF8_BOM) else line
        if not line.strip():
            continue
        if not started:
            _not_an_array(path, line)
            started = True
        where = f"{path}:{n}"
        yield where, parse_json_line(line, where)


def rows_json(path: Path) -> Iterator[tuple[str, object]]:
    raw = read_bytes(path)
    _not_utf16(path, raw[:2])
    try:
        data = json.loads(raw.decode("utf-8-sig"))  # -sig: a leading byte-order mark is dropped
    except json.JSONDecodeError as e:
        jsonl = e.msg == "Extra data" and e.lineno > 1 and e.colno == 1  # a second document on the next line
        raise DataError(f"{path} is not valid JSON ({e.msg})", where=f"{path}:{e.lineno}",
                        fix=f"it holds one JSON value per line: rename it to {path.stem}.jsonl" if jsonl else
                        "fix the syntax, or use JSONL (one record per line)") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not valid UTF-8 (byte {e.start})", where=str(path),
                        fix="re-save the file as UTF-8") from None
    except RecursionError:
        raise DataError(f"{path} is nested too deeply to hold records", where=str(path),
                        fix="a JSON data file is a list of record objects") from None
    if isinstance(data, dict) and data and all(isinstance(v, dict) for v in data.values()):
        # Keyed by id (OCR-VQA's dataset.json: {"<image id>": {questions, answers, ...}}).
        for n, (key, row) in enumerate(data.items()):
            yield f"{path}:record {n} (key {key!r})", {"id": key, **row}
        return
    if isinstance(data, dict):  # {"data": [...]} or {"train": [...], ...} are common wrappers
        lists = {k: v for k, v in data.items() if isinstance(v, list)}
        if len(lists) == 1:
            data = next(iter(lists.values()))
        else:
            raise DataError(f"{path} holds an object, not a list of records", where=str(path),
                            fix=f"make the top level a list of records (keys found: {', '.join(sorted(data))})")
    if not isinstance(data, list):
        # A number, string or null at the top level holds no records (a string would be read letter by letter).
        raise DataError(f"{path} holds a {_json_kind(data)} at its top level, not a list of records", where=str(path),
                        fix='make the top level a list of record objects: [{"messages": [...]}, ...] (or use JSONL)')
    for n, row in enumerate(data):
        yield f"{path}:record {n}", row


def _json_kind(value) -> str:
    return {bool: "boolean", int: "number", float: "number", str: "string", type(None): "null"}.get(type(value),
                                                                                                  type(value).__name__)


def rows_parquet(path: Path) -> Iterator[tuple[str, object]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 0
    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=256)  # one batch in memory at a time (streaming)
        for batch in batches:
            for row in batch.to_pylist():
                where = f"{path}:row {n}"
                yield where, json_cells(row, where, "parquet")
                n += 1
    except (pa.ArrowException, OSError) as e:
        # Rows already yielded stay read; the rest of a damaged file cannot be told apart from the end.
        raise DataError(f"{path} is not a readable parquet file" + (f" past row {n}" if n else "") + f" ({e})",
                        where=f"{path}:row {n}" if n else str(path),
                        fix="the file is truncated or corrupt: copy or export it again (pyarrow.parquet.read_table "
                            "must open it)") from None


def _undecodable(cells: list[str]) -> str | None:
    """The first byte that was not UTF-8 (kept by surrogateescape) in `cells`, described, or None."""
    for cell in cells:
        for i, ch in enumerate(cell):
            if "\udc80" <= ch <= "\udcff":
                return f"byte 0x{ord(ch) - 0xdc00:02x} in {cell[max(0, i - 10):i].encode('utf-8', 'replace').decode()!r}..."
    return None


# Columns that hold lists or conversations. A CSV cell is a string, so they are written there as JSON text, and a
# table exported from pandas often holds them the same way (a parquet column of json.dumps strings).
JSON_TEXT_COLUMNS = {"messages", "conversations", "images", "videos", "audios", "history", "answers", "questions"}


def json_cells(row: dict, where: str, kind: str):
    """`row` with the JSON text of its JSON_TEXT_COLUMNS parsed (a cell that opens with [ or {), or the
    BadRecord of the first cell that is not valid JSON. Other cells are left as they are."""
    out = None
    for k, v in row.items():
        if k in JSON_TEXT_COLUMNS and isinstance(v, str) and v.lstrip()[:1] in ("[", "{"):
            try:
                parsed = json.loads(v)
            except json.JSONDecodeError as e:
                return BadRecord(f"bad {kind}", f"column {k!r} is not valid JSON ({e.msg})", where,
                                 f'write {k} as JSON in the cell, e.g. ["a.png", "b.png"]' if kind == "csv" else
                                 f"store {k} as a list column, or as valid JSON text")
            out = out if out is not None else dict(row)
            out[k] = parsed
    return row if out is None else out


def rows_csv(path: Path) -> Iterator[tuple[str, object]]:
    import csv

    # utf-8-sig drops a byte-order mark (else it sticks to the first column's name); surrogateescape keeps a
    # byte that is not UTF-8 (a latin-1 'é' from Excel) as a marker, so that row alone is a bad record.
    with open_bytes(path) as raw:
        _not_utf16(path, raw.read(2))  # Excel's "Unicode Text" export
    with open_text(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        reader = csv.DictReader(f)
        bad_header = _undecodable(reader.fieldnames or [])
        if bad_header is not None:
            raise DataError(f"{path}: the header row is not valid UTF-8 ({bad_header})", where=f"{path}:1",
                            fix=f"re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8 {path.name} > out.csv)")
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as e:  # a cell past the csv module's field limit (128 KiB), a stray quote at EOF
                where = f"{path}:{reader.reader.line_num}"  # (DictReader's own count moves on success only)
                yield where, BadRecord("bad csv", f"row cannot be read as CSV ({e})", where,
                                       "quote cells that hold commas, quotes or newlines; keep a cell under 128 KiB "
                                       "(longer text: use JSONL)")
                continue
            where = f"{path}:{reader.line_num}"  # the row's last line: a quoted cell may span several
            bad_text = _undecodable([v for v in row.values() if isinstance(v, str)])
            if bad_text is not None:
                yield where, BadRecord("bad encoding", f"row is not valid UTF-8 ({bad_text})", where,
                                       f"re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8 {path.name} > out.csv)")
                continue
            if None in row:  # more cells than header names
                yield where, BadRecord("bad csv", f"row has {len(row) - 1 + len(row[None])} cells for "
                                       f"{len(reader.fieldnames or [])} columns", where,
                                       "quote cells that contain commas")
                continue
            yield where, json_cells({k: None if v == "" else v for k, v in row.items()}, where, "csv")


def rows_datasets(folder: Path, split: str) -> Iterator[tuple[str, object]]:
    import datasets

    _refuse_empty_save(folder)
    try:
        ds = datasets.load_from_disk(str(folder))
    except (FileNotFoundError, ValueError, IndexError, KeyError, TypeError, OSError) as e:
        # datasets' own reading of a damaged folder (a state.json naming no or missing files, a cut Arrow file):
        # its IndexError / KeyError say nothing a user can act on
        raise DataError(f"{folder} is not a readable dataset saved with save_to_disk ({type(e).__name__}: {e})",
                        where=str(folder),
                        fix="save it again with Dataset.save_to_disk, or give a JSONL/JSON/parquet file") from None
    return dataset_rows(ds, split, str(folder))


def _refuse_empty_save(folder: Path) -> None:
    """A Dataset saved with no rows and no columns lists no data files in its state.json; datasets then fails
    with an IndexError deep in its table concatenation. Said as what it is, with the folder."""
    state = folder / "state.json"
    try:
        files = json.loads(state.read_text()).get("_data_files") if state.is_file() else None
    except (OSError, ValueError, AttributeError):
        return  # load_from_disk reports a damaged state.json itself
    if files == []:
        raise DataError(f"{folder} holds no records: its state.json lists no data files (an empty Dataset was "
                        "saved)", where=str(state), fix="save the dataset again with its rows, or point data.train "
                                                        "at the data you meant")


def regular_file(path: Path) -> None:
    """A data file that is a named pipe would block the reader forever and a device (/dev/zero) never ends:
    refused before opening, as media paths are (media.check_regular)."""
    import stat

    try:
        mode = path.stat().st_mode
    except OSError:
        return  # a missing file is reported where it is read, with its own fix
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise DataError(f"{path} is not a regular file (a named pipe, socket or device): reading it would wait for "
                        "a writer or never end", where=str(path),
                        fix="write the records to a file first (e.g. cat PIPE > data.jsonl) and point data.train at it")


# A file's reader by its suffix; a new file type is one reader above and one line here.
FILE_READERS = {".jsonl": rows_jsonl, ".json": rows_json, ".parquet": rows_parquet, ".csv": rows_csv,
                ".arrow": arrow_rows, ".txt": rows_txt}


TEXT_READERS = (".jsonl", ".json", ".csv")  # the ones a compressed file (train.jsonl.gz) is read through
# Other plain text files: say how raw text is read (a .txt file is one document under data.format=text).
_RAW_TEXT = dict.fromkeys((".text", ".md"),
                          "; for raw text (continued pretraining) save each document as a .txt file, or as the `text` "
                          "of a .jsonl row, and set data.format=text")

# WebDataset shards (LLaVA-Pretrain / LAION as img2dataset writes them) and zipped image sets are archives of files:
# say what they are and what mmtune reads instead (https://github.com/hiyouga/LlamaFactory/issues/7386).
ARCHIVE_FIX = ("; a .tar / .zip is an archive of files (a WebDataset shard keeps each sample's image and its "
               ".json / .txt under one key), and mmtune reads records, not archives: extract it and write a .jsonl "
               "whose records name the extracted images (messages with image parts, data.media_root the folder), or "
               "parquet rows holding the image bytes")
_ARCHIVES = dict.fromkeys((".tar", ".tgz", ".zip"), ARCHIVE_FIX)


def is_archive(path: Path) -> bool:
    return path.name.lower().endswith((".tar", ".tgz", ".tar.gz", ".tar.zst", ".zip"))


def reader_for(path: Path):
    regular_file(path)
    suffix = inner_suffix(path)  # DATA.JSONL, as Windows tools and shouting colleagues name it; a.jsonl.gz: .jsonl
    kind = compression_of(path)
    if suffix not in FILE_READERS or (kind and suffix not in TEXT_READERS):
        raise DataError(f"cannot read {path.name}: unknown file type {''.join(path.suffixes[-2 if kind else -1:])!r}",
                        where=str(path),
                        fix="use .jsonl (one record per line), .json (a list), .parquet, .csv, .arrow (JSONL / JSON / "
                            "CSV also compressed: .gz, .bz2, .xz, .zst), a save_to_disk folder, a dataset repository "
                            "folder or a Hub id ORG/NAME" + _RAW_TEXT.get(suffix, _ARCHIVES.get(suffix, "")))
    return FILE_READERS[suffix] if kind is None else _whole_stream(FILE_READERS[suffix])


def _whole_stream(reader):
    """`reader` over a compressed file: a stream that breaks off mid-file is one error naming the file."""
    def read(path: Path):
        where = str(path)
        try:
            for where, row in reader(path):
                yield where, row
        except (OSError, EOFError, ValueError) as e:
            raise damaged(path, e, where) from None
    return read
