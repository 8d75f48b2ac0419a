"""The question / answer formats' shared reading: the image (in the dataset's own image folder too, or the
file a published set names by id) and one question with its answer(s) (vqa, chartqa, infovqa)."""

from __future__ import annotations

from ..formats import FORMAT_FIELDS, BadRecord, _answer_and_refs, _as_list, _get, _media_part, _qa_record
from ..records import Record


def image_parts(row, fmt, columns, where, rid, resolve) -> list[dict]:
    from ..published import default_image, with_media_dirs

    resolve = with_media_dirs(resolve, fmt)
    fallback = default_image(row, fmt, rid)
    names = (columns["image"],) if "image" in columns else FORMAT_FIELDS[fmt]["image"]
    has_image = any(row.get(n) is not None for n in names)
    img = _get(row, fmt, "image", columns, where) if has_image or fallback is None else fallback
    return [_media_part("image", v, resolve, where) for v in _as_list(img)]


def to_records(row, fmt, columns, where, index, rid, resolve, templates=None) -> list[Record]:
    media = image_parts(row, fmt, columns, where, rid, resolve)
    question = _get(row, fmt, "question", columns, where)
    answer = _get(row, fmt, "answer", columns, where)
    target, refs = _answer_and_refs(answer, where)
    if isinstance(question, (list, tuple)):
        raise BadRecord("missing field", f"question is a list ({len(question)} items) in format {fmt!r}", where,
                        "use data.format=ocrvqa for rows with several questions per image")
    return [_qa_record(rid, where, media, question, target, refs)]
