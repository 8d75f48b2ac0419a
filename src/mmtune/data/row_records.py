"""One raw row -> its Records: other tools' layouts normalised (data/variants.py), the row read by its data.format's
module (formats.FORMATS, data/row_formats/), and every text checked to be Unicode text."""

from __future__ import annotations

from collections.abc import Callable

from .formats import BadRecord, _get, checked_text, format_module, text_value
from .records import Record


def row_to_records(row: dict, fmt: str, columns: dict[str, str], where: str, index: int,
                   resolve: Callable[[str, str], str], templates: dict[str, str] | None = None) -> list[Record]:
    """Records from one raw row. `resolve(path, where)` turns a media path into a checked absolute one;
    `templates` ({question, answer}) write counting sets' text from their fields. Other tools' layouts
    (alpaca, ms-swift, OpenAI parts, a top-level system) go through data/variants.py."""
    from .variants import finish_records, normalize_row

    if not isinstance(row, dict):
        raise BadRecord("missing field", f"record is a {type(row).__name__}, not an object", where,
                        "each record is a JSON object (one per line in JSONL)")
    row, fmt, columns = normalize_row(row, fmt, columns, where)
    records = finish_records(_read_row(row, fmt, columns, where, index, resolve, templates), row, fmt,
                             where)
    for r in records:
        checked_text(r)
    return records


def _read_row(row: dict, fmt: str, columns: dict[str, str], where: str, index: int,
              resolve: Callable[[str, str], str], templates: dict[str, str] | None = None) -> list[Record]:
    rid = _get(row, fmt, "id", columns, where)
    rid = text_value(rid, "id", where) if rid is not None else str(index)
    return format_module(fmt).to_records(row, fmt, columns, where, index, rid, resolve, templates)
