"""Grounding boxes written in a record's text, read against the coordinate space its model family expects.

Qwen2-VL and Qwen3-VL write a box on a 0-1000 grid of the image whatever its size; Qwen2.5-VL writes absolute
pixels of the image its processor made (smart_resize to multiples of 28 inside model.max_pixels / min_pixels), not
of the file (`Family.box_coordinates`). A box in another space trains without any error and the model learns
shifted boxes (QwenLM/Qwen3-VL#721, #957, #1161; #1623 for Qwen2.5-VL data reused on Qwen3-VL). One box alone
rarely proves its space, but a box that lies outside the space it should be in does: past 1000 on a grid, past
the resized image's edge in resized pixels. The doctor's data scan tallies them (MM273).

Read: `<|box_start|>(x1,y1),(x2,y2)<|box_end|>` (Qwen2-VL's text form) and `"bbox_2d": [x1, y1, x2, y2]` (the
JSON of Qwen2.5-VL and Qwen3-VL), in every turn. Records with several images are not judged (which image a box
belongs to is not written down).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from ..evaluate.metrics import find_boxes

EXAMPLES = 3

# kind -> what it means; the check words its finding from these.
KINDS = {
    "fractions": "written as 0-1 fractions of the image",
    "pixels": "past 1000: pixels, not the 0-1000 grid",
    "original": "outside the resized image the model sees but inside the original file: the file's pixels",
    "grid1000": "outside both the resized image and the file, inside 0-1000: a 0-1000 grid",
    "outside": "outside the image in any space",
    "inverted": "with x2 < x1 or y2 < y1",
}


@dataclass
class BoxTally:
    boxes: int = 0  # boxes judged
    unjudged: int = 0  # boxes in records with several images (not judged)
    records: int = 0  # records with at least one judged box
    off: Counter = field(default_factory=Counter)  # kind -> boxes
    examples: dict = field(default_factory=dict)  # kind -> [(where, what)]

    def add(self, kind: str, where: str, what: str) -> None:
        self.off[kind] += 1
        ex = self.examples.setdefault(kind, [])
        if len(ex) < EXAMPLES:
            ex.append((where, what))


def _text(record) -> str:
    from .records import content_parts, part_text

    return "\n".join(part_text(content_parts(m.get("content"))) for m in record.messages)


def observe(record, processor, family, tally: BoxTally) -> None:
    """Tally `record`'s boxes against `family.box_coordinates` (silent for a family whose space is unknown)."""
    space = getattr(family, "box_coordinates", None)
    if space is None:
        return
    text = _text(record)
    if "box" not in text:  # neither form can be there: no regex on most records
        return
    boxes = find_boxes(text)
    if not boxes:
        return
    images = [p for p in record.media_parts() if p["type"] == "image"]
    if len(images) != 1:
        tally.unjudged += len(boxes)
        return
    from ..errors import DataError
    from . import media_probe

    where = record.where()
    try:
        h0, w0 = media_probe.image_size(images[0], where)
    except DataError:
        return  # unreadable media are MM018's
    rh = rw = None
    if space == "resized_pixels":
        from ..compat.processors import resized_image_size

        got = resized_image_size(processor, h0, w0)
        if got is None:
            return
        rh, rw = got
    tally.records += 1
    for raw, (x1, y1, x2, y2) in boxes:
        tally.boxes += 1
        kind = _kind(space, (x1, y1, x2, y2), (w0, h0), (rw, rh))
        if kind:
            seen = f"{w0}x{h0} file" + (f", {rw}x{rh} after the processor's resize" if rw else "")
            tally.add(kind, where, f"{raw} on a {seen}")


def _kind(space: str, box, original, resized) -> str | None:
    x1, y1, x2, y2 = box
    if not all(math.isfinite(v) for v in box):  # a coordinate of 310+ digits reads as an infinite float
        return "outside"
    if x2 < x1 or y2 < y1:
        return "inverted"
    if max(box) <= 1 and any(v != int(v) for v in box):
        return "fractions"
    xs, ys = max(x1, x2), max(y1, y2)
    if space == "grid1000":
        return "pixels" if max(box) > 1000 else None
    (w0, h0), (rw, rh) = original, resized
    if xs <= rw and ys <= rh:
        return None
    if xs <= w0 and ys <= h0:
        return "original"
    return "grid1000" if xs <= 1000 and ys <= 1000 else "outside"
