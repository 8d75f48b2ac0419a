"""data.format=vqa: one image, a question and its answer (or a list of accepted answers)."""

from __future__ import annotations

from .qa import to_records  # noqa: F401 - this format's reader

FIELDS = {"image": ("image", "images"), "question": ("question",), "answer": ("answer", "answers"),
          "id": ("id", "question_id")}
