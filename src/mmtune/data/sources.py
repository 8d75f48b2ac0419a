"""Where records come from: JSONL, JSON, parquet, a `datasets` folder (save_to_disk), or synthetic:NAME.

`load_records(spec, data_cfg, split)` reads rows, turns each into Records through the configured
format, resolves and checks media paths, and applies `data.on_bad_record`: "error" raises at the first
bad record with file:line and the fix; "skip" skips it and counts it by reason (never silently).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..config.aliases import SPLIT_ALIASES
from ..errors import DataError
from .formats import BadRecord, check_format, isolated, row_to_records
from .records import RecordSet

FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


def split_candidates(split: str) -> tuple[str, ...]:
    return SPLIT_ALIASES.get(split, (split,))


def split_alias_of(p: Path) -> Path | None:
    """An existing sibling whose name differs only by a split alias (`.../validation.jsonl` asked,
    `.../val.jsonl` there), or None."""
    suffix = p.suffix if p.suffix in FILE_SUFFIXES + (".arrow",) else ""
    stem = p.name[: len(p.name) - len(suffix)]
    for group in (SPLIT_ALIASES["train"], SPLIT_ALIASES["eval"], SPLIT_ALIASES["test"]):
        for name in group:
            if stem == name or stem.endswith(("_" + name, "-" + name, "." + name)):
                head = stem[: len(stem) - len(name)]
                for alias in group:
                    cand = p.with_name(head + alias + suffix)
                    if alias != name and cand.exists():
                        return cand
    return None


def resolve_split(spec: str, split: str) -> tuple[str, str | None]:
    """What `data.train` / `data.eval` will read, decided once: (spec, note or None).

    A folder becomes `FOLDER::NAME` with the split found under its aliases (eval -> validation, val,
    valid, dev, eval; never test); a file that does not exist but whose split-alias sibling does is replaced
    by it (ChartQA publishes `val`, users write `validation`). Anything else is returned unchanged and
    fails, with its reason, when read."""
    if spec.startswith("synthetic:") or "::" in spec:
        return spec, None
    path = Path(spec).expanduser()
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
            names = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
        elif (path / "state.json").is_file():
            return spec, None  # a single saved Dataset: no splits
        else:
            names = sorted(p.stem for p in path.iterdir() if p.suffix in FILE_SUFFIXES)
        name = next((n for n in split_candidates(split) if n in names), None)
        if name is None:
            return spec, None
        return f"{spec}::{name}", f"split {name!r} of the folder (splits: {', '.join(names)})"
    if not path.exists():
        alias = split_alias_of(path)
        if alias is not None:
            return str(alias), f"{spec} does not exist; its split alias {alias.name} does (failure mode 15)"
    return spec, None


def pick_split(available: list[str], split: str, where: str) -> str:
    for name in split_candidates(split):
        if name in available:
            return name
    raise DataError(f"{where} has no {split!r} split", where=where,
                    fix=f"splits found: {', '.join(available) or '(none)'}; point data.train/data.eval at one of "
                        f"them or name the split explicitly as PATH::SPLIT")


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


def _rows_jsonl(path: Path) -> Iterator[tuple[str, object]]:
    # Read bytes, decode per line: one line in another encoding is one bad record, not a dead file.
    with open(path, "rb") as f:
        for n, line in enumerate(f, start=1):
            if n == 1 and line.startswith(UTF8_BOM):
                line = line[len(UTF8_BOM):]
            if not line.strip():
                continue
            where = f"{path}:{n}"
            yield where, parse_json_line(line, where)


def _rows_json(path: Path) -> Iterator[tuple[str, object]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))  # -sig: a leading byte-order mark is dropped
    except json.JSONDecodeError as e:
        raise DataError(f"{path} is not valid JSON ({e.msg})", where=f"{path}:{e.lineno}",
                        fix="fix the syntax, or use JSONL (one record per line)") from None
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


def _rows_parquet(path: Path) -> Iterator[tuple[str, object]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 0
    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=256)  # one batch in memory at a time (streaming)
        for batch in batches:
            for row in batch.to_pylist():
                yield f"{path}:row {n}", row
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


# CSV cells are strings; these columns hold lists or conversations, written as JSON in a cell.
CSV_JSON_COLUMNS = {"messages", "conversations", "images", "videos", "audios", "history", "answers", "questions"}


def _rows_csv(path: Path) -> Iterator[tuple[str, object]]:
    import csv

    # utf-8-sig drops a byte-order mark (else it sticks to the first column's name); surrogateescape keeps a
    # byte that is not UTF-8 (a latin-1 'é' from Excel) as a marker, so that row alone is a bad record.
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
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
            out: dict = {}
            for k, v in row.items():
                if v == "" or v is None:
                    out[k] = None
                elif k in CSV_JSON_COLUMNS and v.lstrip()[:1] in "[{":
                    try:
                        out[k] = json.loads(v)
                    except json.JSONDecodeError as e:
                        out[k] = BadRecord("bad csv", f"column {k!r} is not valid JSON ({e.msg})", where,
                                           f'write {k} as JSON in the cell, e.g. ["a.png", "b.png"]')
                else:
                    out[k] = v
            bad = next((v for v in out.values() if isinstance(v, BadRecord)), None)
            yield where, bad if bad is not None else out


def _rows_datasets(folder: Path, split: str) -> Iterator[tuple[str, object]]:
    import datasets

    from .hub import dataset_rows

    try:
        ds = datasets.load_from_disk(str(folder))
    except (FileNotFoundError, ValueError) as e:
        raise DataError(f"{folder} is not a dataset saved with save_to_disk ({e})", where=str(folder),
                        fix="give a JSONL/JSON/parquet file, or a folder written by Dataset.save_to_disk") from None
    return dataset_rows(ds, split, str(folder))


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
    if not path.exists():
        raise DataError(f"data source {str(path)!r} does not exist", where=spec,
                        fix="give a JSONL/JSON/parquet/CSV/Arrow file, a dataset folder, a Hub id ORG/NAME, "
                            "or synthetic:counting")
    if path.is_dir():
        from .published import fsc147_rows, is_fsc147

        if is_fsc147(path):
            return path, fsc147_rows(path, split)
        if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
            return path, _rows_datasets(path, split)
        if subset or is_dataset_repo(path, declared_only=True):  # the repository's README declares its layout
            return path, repo_rows(path, split, subset)
        files = split_files(path, split_candidates(split), parts)
        if not files and is_dataset_repo(path):  # data/train-00000-of-00001.parquet, as the Hub lays it out
            return path, repo_rows(path, split)
        if not files:
            found = sorted(p.name for p in path.iterdir() if p.suffix in FILE_SUFFIXES)
            raise DataError(f"{path} has no {split!r} split", where=str(path),
                            fix=f"files found: {', '.join(found) or '(none)'}; name one ({'/'.join(split_candidates(split))}"
                                f" + .jsonl/.json/.parquet) or point at the file itself")
        if len(files) > 1:
            return files[0].parent, chain.from_iterable(_reader(f)(f) for f in files)
        path = files[0]
    return path.parent, _reader(path)(path)


def _reader(path: Path):
    from .hub import arrow_rows

    readers = {".jsonl": _rows_jsonl, ".json": _rows_json, ".parquet": _rows_parquet, ".csv": _rows_csv,
               ".arrow": arrow_rows}
    if path.suffix not in readers:
        raise DataError(f"cannot read {path.name}: unknown file type {path.suffix!r}", where=str(path),
                        fix="use .jsonl (one record per line), .json (a list), .parquet, .csv, .arrow, a "
                            "save_to_disk folder, a dataset repository folder or a Hub id ORG/NAME")
    return readers[path.suffix]


def make_resolver(base: Path, media_root: str | None):
    root = Path(media_root).expanduser() if media_root else base
    # VQA sets name each image from many records (90k references to 2k files in benchmarks/first_step.py):
    # a path found once is not looked up again in this load (~40 us of pathlib and stat a reference).
    found: dict[str, str] = {}

    def resolve(p: str, where: str) -> str:
        if isinstance(p, str) and p in found:
            return found[p]
        if not isinstance(p, str) or not p.strip():
            raise BadRecord("bad type", f"a media path must be a non-empty string, not {p!r}"[:200], where,
                            "give media paths as strings, relative to data.media_root or the data file's folder")
        if "://" in p:
            raise BadRecord("missing media", f"media {p!r} is a URL; mmtune reads local files only", where,
                            "download the files and give local paths (relative to data.media_root)")
        try:
            q = Path(p).expanduser()
            full = q if q.is_absolute() else root / q
            exists = full.exists()
        except (OSError, ValueError, RuntimeError) as e:  # a name too long, a NUL byte, ~user unknown
            raise BadRecord("missing media", f"media path {p[:120]!r} cannot be looked up ({e})"[:300], where,
                            "give the media file's path, relative to data.media_root or the data file's folder") from None
        if not exists:
            raise BadRecord("missing media", f"media file not found: {full}", where,
                            f"check the path; relative paths resolve against "
                            f"{'data.media_root' if media_root else 'the data file folder'} ({root}). "
                            "Set data.media_root, or data.on_bad_record=skip to skip such records")
        found[p] = str(full)
        return found[p]

    return resolve


def load_records(spec, data_cfg, split: str = "train") -> RecordSet:
    """Records of one split. `spec` is a path (optionally PATH::SPLIT), `synthetic:NAME`, or a list of
    mixture sources (data.train as a list; see data/mixture.py)."""
    if isinstance(spec, (list, tuple)):
        from .mixture import load_mixture

        return load_mixture(spec, data_cfg, split)
    if split == "train" and getattr(data_cfg, "streaming", False):  # its first K records (data/streaming.py)
        from .streaming import sample_records

        return sample_records(spec, data_cfg, split)
    rs = load_source(spec, data_cfg, split)
    if split != "train" and data_cfg.eval_max_samples and len(rs.records) > data_cfg.eval_max_samples:
        rs.notes.append(f"kept the first {data_cfg.eval_max_samples} of {len(rs.records)} records (data.eval_max_samples)")
        rs.records = rs.records[: data_cfg.eval_max_samples]
    return rs


@dataclass
class OpenSource:
    """One source's rows and how to read them (load_source and the doctor's data pass share it)."""

    rows: Iterator[tuple[str, object]]
    resolve: object  # media path resolver (make_resolver)
    fmt: str
    columns: dict
    to_row: object  # a data.dataset_info entry's row mapping, or None
    wanted: str  # the split rows must belong to
    templates: dict  # data.question_template / answer_template that are set

    def records(self, where: str, row, index: int) -> list:
        """The row's records (load_source's, the stream's); a bad row raises its BadRecord."""
        if isinstance(row, BadRecord):
            raise row
        with isolated(where):
            if self.to_row is not None:
                row = self.to_row(row, where)
            return row_to_records(row, self.fmt, self.columns, where, index, self.resolve, templates=self.templates)


def open_source(spec: str, data_cfg, split: str = "train", parts: list[str] | None = None) -> OpenSource:
    fmt, columns, media_root, to_row = data_cfg.format, dict(data_cfg.columns), data_cfg.media_root, None
    registered = _registry_entry(spec, data_cfg)
    if registered is not None:  # a name in LLaMA-Factory's dataset_info.json (data/dataset_info.py)
        fmt, columns, to_row = ("preference" if registered.ranking else "alpaca" if registered.formatting == "alpaca"
                                else "messages"), {}, registered.to_row
        media_root = media_root or str(registered.registry.parent)
        base, rows = registered.rows(spec.partition("::")[2] or None)
        wanted = spec.partition("::")[2] or registered.split
    else:
        check_format(fmt, columns)
        if split == "train" and getattr(data_cfg, "streaming", False) and not spec.startswith("synthetic:"):
            # Read lazily: the doctor's pass over a stream reads its first rows only.
            from .streaming import stream_rows

            base, rows = stream_rows(spec, split)
        else:
            base, rows = iter_rows(spec, split, parts)
        wanted = spec.partition("::")[2] or split
    templates = {k: v for k, v in (("question", data_cfg.question_template), ("answer", data_cfg.answer_template)) if v}
    return OpenSource(rows, make_resolver(base, media_root), fmt, columns, to_row, wanted, templates)


def load_source(spec: str, data_cfg, split: str = "train", parts: list[str] | None = None) -> RecordSet:
    """All records of one source's split, before any eval cap or mixture sampling."""
    from .published import in_split

    if spec.startswith("synthetic:"):
        from .synthetic import load_synthetic

        return load_synthetic(spec.split(":", 1)[1], data_cfg, split)
    src = open_source(spec, data_cfg, split, parts)
    rs = RecordSet()
    n_rows = other_split = empty_media = 0
    first_empty = ""
    for index, (where, row) in enumerate(src.rows):
        if not in_split(row, src.fmt, src.wanted):
            other_split += 1
            continue
        n_rows += 1
        try:
            got = src.records(where, row, index)
        except BadRecord as e:
            rs.bad(e, where, data_cfg.on_bad_record)
            continue
        rs.records.extend(got)
        if isinstance(row, dict) and not any(r.media_parts() for r in got) and lists_no_media(row):
            empty_media += 1
            first_empty = first_empty or where
    if other_split:
        rs.notes.append(f"{spec}: left out {other_split} entries marked for another split than {src.wanted!r}")
    if empty_media:
        rs.notes.append(f"warning: {empty_media} record(s) give an empty images/videos/audios list and train as "
                        f"text only (first: {first_empty}); if their media are missing, fix the lists")
    dup = duplicate_ids(rs.records)
    if dup:
        rs.notes.append(dup)
    if src.fmt == "ocrvqa":
        rs.notes.append(f"{spec}: {n_rows} OCR-VQA images expanded to {len(rs.records)} question/answer samples")
    if not rs.records:
        raise DataError(f"no usable records in {spec} ({rs.summary()})", where=spec,
                        fix="check the file and data.format" + (f"; first problem: {rs.problems[0]}" if rs.problems else ""))
    return rs


MEDIA_LIST_FIELDS = ("images", "image", "videos", "video", "audios", "audio")


def lists_no_media(row: dict) -> bool:
    """A row whose media list is there but empty (`"images": []`): counted as a warning, since a
    multimodal set's record that lost its files would otherwise train as text without a word."""
    return any(isinstance(row.get(k), (list, tuple)) and len(row[k]) == 0 for k in MEDIA_LIST_FIELDS)


def duplicate_ids(records) -> str | None:
    """A note when records share an id (kept, all of them: a repeated id is often a second question on
    the same image, but predictions and per-record results are keyed by it): the count and the first few."""
    first: dict[str, str] = {}
    repeats: list[str] = []
    for r in records:
        if r.id in first:
            repeats.append(f"{r.source} repeats id {r.id!r} of {first[r.id]}")
        else:
            first[r.id] = r.source
    if not repeats:
        return None
    return (f"{len(repeats)} record(s) repeat an id already used (all kept; predictions.jsonl and per-record "
            f"results name records by id): " + "; ".join(repeats[:3]) + (" ..." if len(repeats) > 3 else ""))


def _registry_entry(spec: str, data_cfg):
    """The data.dataset_info entry `spec` names (NAME or NAME::SPLIT), or None when it names none."""
    if not getattr(data_cfg, "dataset_info", None):
        return None
    from .dataset_info import entry, registry_names
    from .hub import is_hub_id

    name = spec.partition("::")[0]
    if (Path(name).expanduser().exists() or is_hub_id(name)) and name not in registry_names(data_cfg.dataset_info):
        return None  # a path or Hub id beside the registry's names (the registry is read again only for these)
    return entry(data_cfg.dataset_info, name)  # a name, or an error with the registry's names
