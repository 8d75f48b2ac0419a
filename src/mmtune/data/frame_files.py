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
