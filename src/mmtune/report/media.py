"""A prediction's media as inline HTML: image thumbnails, a strip of video frames, an audio player.
Everything becomes a data: URI so the page needs no file beside it."""

from __future__ import annotations

import base64
import io
from html import escape
from pathlib import Path

from ..errors import DataError

THUMB = 160  # pixels on the long side: enough to check a prediction, small enough for 12 rows
VIDEO_FRAMES = 4
AUDIO_MAX_BYTES = 2 * 2**20  # a longer clip is linked by path instead of inlined
AUDIO_MIME = {".wav": "audio/wav", ".flac": "audio/flac", ".mp3": "audio/mpeg", ".ogg": "audio/ogg",
              ".m4a": "audio/mp4"}


def _img_tag(img, title: str) -> str:
    img = img.copy()
    img.thumbnail((THUMB, THUMB))
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    b64 = base64.b64encode(buf.getvalue()).decode()
    return f'<img src="data:image/png;base64,{b64}" title="{escape(title)}" alt="{escape(title)}">'


def _audio_tag(part: dict) -> str:
    path = part.get("path")
    if path is None:
        return '<span class="dim">in-memory audio</span>'
    p = Path(path)
    if p.suffix.lower() not in AUDIO_MIME or p.stat().st_size > AUDIO_MAX_BYTES:
        return f'<span class="dim">audio: {escape(str(p))}</span>'
    b64 = base64.b64encode(p.read_bytes()).decode()
    return f'<audio controls src="data:{AUDIO_MIME[p.suffix.lower()]};base64,{b64}" title="{escape(p.name)}"></audio>'


def media_html(record) -> str:
    from ..data.media import load_image, load_video
    from ..data.records import media_label

    out = []
    for part in record.media_parts():
        kind, label = part.get("type"), media_label(part)
        try:
            if kind == "image":
                out.append(_img_tag(load_image(part, record.where()), label))
            elif kind == "video":
                clip = load_video(part, record.where(), n_frames=VIDEO_FRAMES)  # evenly spaced frames
                out.append('<span class="strip">' + "".join(_img_tag(f, label) for f in clip.frames) + "</span>")
            elif kind == "audio":
                out.append(_audio_tag(part))
        except (DataError, OSError) as e:  # a file moved since the run: say so in place of the picture
            out.append(f'<span class="dim">{escape(kind or "media")} not readable: {escape(str(getattr(e, "what", e)))}</span>')
    return "".join(out)
