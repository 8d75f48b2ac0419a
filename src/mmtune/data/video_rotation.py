"""A decoded video frame as viewers show it: the container's display rotation applied.

Phones record portrait clips as landscape pixels plus a display matrix ("rotation of -90 degrees" in
ffprobe), as they do for photos with EXIF (media.upright). Players, the ffmpeg command line (which also
writes frame folders upright) and torchcodec since 0.11, transformers' default video decoder, turn the
frames; PyAV hands them over as stored. Decoded as stored, a portrait clip was trained sideways and
served upright: https://github.com/meta-pytorch/torchcodec/issues/1084 (PR 1173),
https://github.com/dmlc/decord/issues/24, https://github.com/opencv/opencv/issues/15499.
"""

from __future__ import annotations

# PyAV's `VideoFrame.rotation`: the display matrix's angle in degrees counter-clockwise (ffmpeg's
# av_display_rotation_get), which PIL's transposes take the same way round.
_TURNS = {90: "ROTATE_90", 180: "ROTATE_180", 270: "ROTATE_270"}


def frame_image(frame):
    """PyAV VideoFrame -> RGB PIL image, turned upright by its display rotation (multiples of 90 degrees;
    other angles do not occur in camera files and are left as stored)."""
    from PIL import Image

    img = frame.to_image().convert("RGB")
    turn = _TURNS.get(round(getattr(frame, "rotation", 0) or 0) % 360)
    return img.transpose(getattr(Image.Transpose, turn)) if turn else img
