"""data.format=ocrvqa: one row per image with lists of questions and answers, flattened to one record per
pair (ids `ID#k`)."""

from __future__ import annotations

from ..formats import BadRecord, _answer_and_refs, _as_list, _get, _qa_record
from ..records import Record
from .qa import image_parts

FIELDS = {"image": ("image", "image_path"), "question": ("questions",), "answer": ("answers",),
          "id": ("id", "image_id")}


def to_records(row, fmt, columns, where, index, rid, resolve, templates=None) -> list[Record]:
    media = image_parts(row, fmt, columns, where, rid, resolve)
    question = _get(row, fmt, "question", columns, where)
    answer = _get(row, fmt, "answer", columns, where)
    qs, ans = _as_list(question), _as_list(answer)
    if len(qs) != len(ans):
        raise BadRecord("missing field", f"{len(qs)} questions but {len(ans)} answers", where,
                        "OCR-VQA rows pair questions[i] with answers[i]; fix the row or skip it")
    out = []
    for k, (q, a) in enumerate(zip(qs, ans)):
        target, refs = _answer_and_refs(a, f"{where} (QA {k})")
        out.append(_qa_record(f"{rid}#{k}", where, [dict(m) for m in media], q, target, refs))
    return out


def load_note(spec: str, n_rows: int, n_records: int) -> str:
    """What one_source.load_source notes about a source read in this format."""
    return f"{spec}: {n_rows} OCR-VQA images expanded to {n_records} question/answer samples"
