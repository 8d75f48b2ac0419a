"""Defaults a data format brings for keys the config leaves unset: a transcription set (data.format=asr) is
scored with word and character error rates, over transcripts longer than the 16 new tokens a short answer needs.
Filled into the config tree before validation, with the format named as where each value came from (the start-up
summary and config.resolved.yaml say so, as for a profile's values)."""

from __future__ import annotations

FORMAT_DEFAULTS = {"asr": {"eval.metrics": ["wer", "cer"], "eval.max_new_tokens": 128}}


def with_format_defaults(tree: dict, sources: dict | None) -> dict:
    """`tree` with its single data format's defaults for the keys it does not set (a mixture's sources keep
    their per-source metrics: data/mixture.py FORMAT_METRICS)."""
    data = tree.get("data") if isinstance(tree.get("data"), dict) else {}
    fmt = data.get("format")  # before validation: a list or mapping given here is the schema's error, not a lookup's
    defaults = FORMAT_DEFAULTS.get(fmt) if isinstance(fmt, str) and not isinstance(data.get("train"), list) else None
    for key, value in (defaults or {}).items():
        section, name = key.split(".")
        part = tree.setdefault(section, {})
        if isinstance(part, dict) and part.get(name) is None:
            part[name] = value
            if sources is not None:
                sources[key] = f"data.format={data['format']}'s default"
    return tree
