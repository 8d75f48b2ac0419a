"""data.format=chartqa: ChartQA's published names first (data/published.py describes its layout), then the
names its Hugging Face copies use."""

from __future__ import annotations

from .qa import to_records  # noqa: F401 - this format's reader

FIELDS = {"image": ("imgname", "image"), "question": ("query", "question"), "answer": ("label", "answer"),
          "id": ("id",)}
