"""One source (a file, a folder, a Hub id, a data.dataset_info name or synthetic:NAME) opened and read into
records: rows (rows.py) through the configured format, media paths resolved and checked, and
`data.on_bad_record` applied: "error" raises at the first bad record with file:line and the fix; "skip" skips
it and counts it by reason (never silently).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from .formats import BadRecord, check_format, format_module, isolated
from .media_whereabouts import Whereabouts
from .records import RecordSet
from .row_records import row_to_records
from .rows import iter_rows, stream_rows
from .windows_paths import posix_form, windows_drive


def make_resolver(base: Path, media_root: str | None):
    root = Path(media_root).expanduser() if media_root else base
    # VQA sets name each image from many records (90k references to 2k files in benchmarks/first_step.py):
    # a path found once is not looked up again in this load (~40 us of pathlib and stat a reference).
    found: dict[str, str] = {}
    whereabouts = Whereabouts(root, bool(media_root))  # where missing paths are after all (media_whereabouts.py)

    def resolve(p: str, where: str) -> str:
        if isinstance(p, str) and p in found:
            return found[p]
        if not isinstance(p, str) or not p.strip():
            raise BadRecord("bad type", f"a media path must be a non-empty string, not {p!r}"[:200], where,
                            "give media paths as strings, relative to data.media_root or the data file's folder")
        if "://" in p:
            raise BadRecord("missing media", f"media {p!r} is a URL; mmtune reads local files only", where,
                            "download the files and give local paths (relative to data.media_root)")
        drive = windows_drive(p)
        if drive:
            raise BadRecord("missing media", f"media path '{p[:160]}' is a Windows path (drive {drive}), which this "
                            "machine cannot open", where,
                            "write media paths relative to the data file's folder (images/cat.jpg; '\\' is read as "
                            "'/'), or relative to data.media_root set to the folder that holds them here")
        try:
            q = Path(p).expanduser()
            full = q if q.is_absolute() else root / q
            exists = full.exists()
        except (OSError, ValueError, RuntimeError) as e:  # a name too long, a NUL byte, ~user unknown
            raise BadRecord("missing media", f"media path {p[:120]!r} cannot be looked up ({e})"[:300], where,
                            "give the media file's path, relative to data.media_root or the data file's folder") from None
        if not exists and (windows := posix_form(root, p)) is not None:
            full, exists = windows, True  # a path written on Windows (windows_paths.py)
        if not exists:
            raise BadRecord("missing media", f"media file not found: {full}", where, whereabouts.hint(p) or
                            f"check the path; relative paths resolve against "
                            f"{'data.media_root' if media_root else 'the data file folder'} ({root}). "
                            "Set data.media_root, or data.on_bad_record=skip to skip such records")
        found[p] = str(full)
        return found[p]

    return resolve


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
    row_format: object = None  # a registry entry's format for a row where it is not `fmt` (Entry.row_format)

    def format_of(self, row) -> str:
        return (self.row_format(row) if self.row_format is not None else None) or self.fmt

    def records(self, where: str, row, index: int) -> list:
        """The row's records (load_source's, the stream's); a bad row raises its BadRecord."""
        if isinstance(row, BadRecord):
            raise row
        with isolated(where):
            fmt = self.format_of(row)
            if self.to_row is not None:
                row = self.to_row(row, where)
            return row_to_records(row, fmt, self.columns, where, index, self.resolve, templates=self.templates)


def open_source(spec: str, data_cfg, split: str = "train", parts: list[str] | None = None) -> OpenSource:
    fmt, columns, media_root, to_row = data_cfg.format, dict(data_cfg.columns), data_cfg.media_root, None
    row_format = None
    registered = _registry_entry(spec, data_cfg)
    if registered is not None:  # a name in LLaMA-Factory's dataset_info.json (data/dataset_info.py)
        fmt, columns, to_row = ("preference" if registered.ranking else "alpaca" if registered.formatting == "alpaca"
                                else "messages"), {}, registered.to_row
        media_root = media_root or str(registered.registry.parent)
        row_format = registered.row_format
        base, rows = registered.rows(spec.partition("::")[2] or None)
        wanted = spec.partition("::")[2] or registered.split
    else:
        check_format(fmt, columns)
        if split == "train" and getattr(data_cfg, "streaming", False) and not spec.startswith("synthetic:"):
            # Read lazily: the doctor's pass over a stream reads its first rows only.
            base, rows = stream_rows(spec, split)
        else:
            base, rows = iter_rows(spec, split, parts)
        wanted = spec.partition("::")[2] or split
    templates = {k: v for k, v in (("question", data_cfg.question_template), ("answer", data_cfg.answer_template)) if v}
    return OpenSource(rows, make_resolver(base, media_root), fmt, columns, to_row, wanted, templates, row_format)


def load_source(spec: str, data_cfg, split: str = "train", parts: list[str] | None = None) -> RecordSet:
    """All records of one source's split, before any eval cap or mixture sampling."""
    from .published import in_split

    if spec.startswith("synthetic:"):
        from .synthetic import load_synthetic

        return load_synthetic(spec.split(":", 1)[1], data_cfg, split)
    src = open_source(spec, data_cfg, split, parts)
    rs = RecordSet()
    n_rows = other_split = empty_media = 0
    first_empty = first_fix = ""
    for index, (where, row) in enumerate(src.rows):
        if not in_split(row, src.fmt, src.wanted):
            other_split += 1
            continue
        n_rows += 1
        try:
            got = src.records(where, row, index)
        except BadRecord as e:
            rs.bad(e, where, data_cfg.on_bad_record)
            first_fix = first_fix or e.fix or ""  # (it names the fields a row has: a file of wrong columns)
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
    note = getattr(format_module(src.fmt), "load_note", None)  # a format's own word on the source (ocrvqa's)
    if note is not None:
        rs.notes.append(note(spec, n_rows, len(rs.records)))
    if not rs.records:
        raise DataError(f"no usable records in {spec} ({rs.summary()})", where=spec,
                        fix="check the file and data.format" + (f"; first problem: {rs.problems[0]}" if rs.problems else "")
                        + (f"; its fix: {first_fix}" if first_fix else ""))
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
