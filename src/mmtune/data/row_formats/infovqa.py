"""data.format=infovqa: InfographicVQA's published names first (data/published.py), then its Hugging Face
copies'; `answers` holds every accepted answer."""

from __future__ import annotations

from .qa import to_records  # noqa: F401 - this format's reader

FIELDS = {"image": ("image_local_name", "image"), "question": ("question", "query"),
          "answer": ("answers", "answer"), "id": ("questionId", "question_id", "id")}
