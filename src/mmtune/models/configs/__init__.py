"""Public configs of real models, embedded so `mmtune plan` works at real size with no download.

Each JSON file holds `name`, `hub_id` (and `aliases`), the model's `config` (as in its config.json on the
hub) and `processor` facts (patch sizes, pixel caps, audio feature settings). `embedded(name)` finds
one by hub id, alias or short name, case-insensitively.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).parent


@lru_cache(maxsize=None)
def _all() -> dict[str, dict]:
    out = {}
    for f in sorted(HERE.glob("*.json")):
        spec = json.loads(f.read_text())
        for key in [spec["name"], spec["hub_id"], *spec.get("aliases", [])]:
            out[key.lower()] = spec
            out[key.lower().split("/")[-1]] = spec
    return out


def embedded(name: str) -> dict | None:
    """The embedded spec for a hub id / alias / short name, or None."""
    return _all().get(name.lower()) or _all().get(name.lower().split("/")[-1])


def embedded_names() -> list[str]:
    return sorted({s["hub_id"] for s in _all().values()})


def nearest_embedded(name: str, n: int = 5) -> list[str]:
    """Hub ids of the embedded models whose names are nearest to `name` (other sizes of its family first), or []."""
    import difflib
    import re

    def short(s: str) -> str:
        return s.lower().split("/")[-1]

    def family(s: str) -> str:  # the name before its size: "qwen2.5-coder-7b-instruct" -> "qwen2.5-coder"
        return re.split(r"-\d+(\.\d+)?[bm]\b", short(s))[0]

    want = short(name)
    scores = {}
    for key, spec in _all().items():
        if "/" in key or not key:
            continue
        score = difflib.SequenceMatcher(None, want, key).ratio() + (0.5 if family(key) == family(want) else 0.0)
        scores[spec["hub_id"]] = max(scores.get(spec["hub_id"], 0.0), score)
    best = sorted((s, h) for h, s in scores.items() if s >= 0.6)[::-1]
    return [h for _, h in best[:n]]


def hf_config(spec: dict):
    """The transformers config object of an embedded spec."""
    import copy

    from transformers import AutoConfig

    from ..model_config import normalize_legacy_rope

    # A deep copy: the specs are cached for the process, and configs keep (and normalise) nested dicts.
    cfg = copy.deepcopy(spec["config"])
    model_type = cfg.pop("model_type")
    config = AutoConfig.for_model(model_type, **cfg)
    normalize_legacy_rope(config)
    return config
