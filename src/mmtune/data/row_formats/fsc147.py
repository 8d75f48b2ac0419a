"""data.format=fsc147: FSC147 rows come from its annotation + split files (data/published.py); the question and
the structured answer are written from data.question_template / data.answer_template."""

from __future__ import annotations

from ..formats import _get, _qa_record, count_value, text_value
from ..records import Record
from .qa import image_parts

FIELDS = {"image": ("image",), "object": ("object",), "count": ("count",), "id": ("id",)}

DEFAULT_TEMPLATES = {"question": "How many {object} are there? Answer as COUNT: <number>.",
                     "answer": "COUNT: {count}"}


def to_records(row, fmt, columns, where, index, rid, resolve, templates=None) -> list[Record]:
    media = image_parts(row, fmt, columns, where, rid, resolve)
    t = {**DEFAULT_TEMPLATES, **(templates or {})}
    fields = {"object": text_value(_get(row, fmt, "object", columns, where), "object", where),
              "count": count_value(_get(row, fmt, "count", columns, where), where)}
    answer = t["answer"].format(**fields)
    rec = _qa_record(rid, where, media, t["question"].format(**fields), answer, [answer])
    # What the heatmap auxiliary loss compares with (mmtune.aux_losses.heatmap).
    rec.targets = {k: row[k] for k in ("density", "points", "size") if row.get(k) is not None}
    return [rec]
