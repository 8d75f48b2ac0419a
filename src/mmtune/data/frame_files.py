"""The frame images of a video given as a folder, in clip order (data/media.py reads them, media_probe.py counts them).

Frames cut by `ffmpeg -i clip.mp4 %d.jpg` (its default pattern), by OpenCV loops or by hand are numbered without
zero padding: 1.jpg ... 10.jpg. A plain string sort reads 1, 10, 11, ..., 2, 20: a shuffled clip, trained without a
word. Numbers in names are compared as numbers (natural order), which leaves zero-padded names as they were.
"""

from __future__ import annotations

import re
from pathlib import Path

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple:
    """`frame_2.jpg` before `frame_10.jpg`: digit runs compare as integers, the rest as text (case kept as a tie-break)."""
    parts = _DIGITS.split(name)
    return tuple((0, int(p), p) if i % 2 else (1, p.lower(), p) for i, p in enumerate(parts)), name


def frame_files(folder: Path, suffixes) -> list[Path]:
    """The folder's images (by suffix) in clip order."""
    return sorted((p for p in Path(folder).iterdir() if p.suffix.lower() in suffixes), key=lambda p: natural_key(p.name))


def check_one_size(sizes: list, names: list, part: dict, where: str) -> None:
    """Frames given one by one (a folder, a list of files, in-memory images) must share one size: the processor
    stacks a clip's frames (transformers' video processors and qwen_vl_utils alike), so mixed sizes fail there as
    "all input arrays must have the same shape", naming no frame. `sizes` are (width, height) of the frames taken."""
    first = sizes[0] if sizes else None
    odd = next((i for i, s in enumerate(sizes) if s != first), None)
    if odd is None:
        return
    from .formats import BadRecord
    from .records import media_label

    (w0, h0), (w1, h1) = first, sizes[odd]
    raise BadRecord("bad media", f"video frames differ in size: {names[0]} is {w0}x{h0}, {names[odd]} is {w1}x{h1}: "
                    f"{media_label(part)}", where,
                    "give the clip's frames one size (resize or re-cut them, e.g. ffmpeg's scale=W:H filter), or drop "
                    "the odd frames")
