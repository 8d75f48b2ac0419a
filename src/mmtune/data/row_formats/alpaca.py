"""data.format=alpaca (LLaMA-Factory's layout): read by data/variants.py into a `messages` row before the
records are made, so its records are the messages format's."""

from __future__ import annotations

from .messages import to_records  # noqa: F401 - what its rows become (variants.normalize_row)

FIELDS = {"instruction": ("instruction",), "input": ("input",), "output": ("output",), "system": ("system",),
          "history": ("history",), "images": ("images", "image"), "videos": ("videos", "video"),
          "audios": ("audios", "audio"), "id": ("id",)}
