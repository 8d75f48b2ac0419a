"""The families the contract tests run over: read from the registry, never listed by hand, so a family
added as one module (docs/internals.md) is tested by every family-parametrised test at once."""

from __future__ import annotations

from pathlib import Path

from mmtune.models.families import FAMILIES

DATA = Path(__file__).resolve().parents[1] / "recipes" / "data"

# every registered family with a tiny twin, in registry order
TWINS: list[str] = [f.tiny for f in FAMILIES.values() if f.tiny]
# the media each family's records carry in the contract tests ("text" for a text-only family)
MEDIA: dict[str, tuple[str, ...]] = {f.tiny: tuple(m for m in f.modalities if m != "text") or ("text",)
                                     for f in FAMILIES.values() if f.tiny}
# the shipped data file of each medium (video: video_audio_qa.jsonl with the audio dropped where needed)
DATA_FILE = {"image": "image_qa.jsonl", "video": "video_audio_qa.jsonl", "audio": "audio_qa.jsonl", "text": None}


def family_of_twin(twin: str):
    return next(f for f in FAMILIES.values() if f.tiny == twin)


def first_medium(twin: str) -> str:
    return MEDIA[twin][0]
