"""The most media items of each kind one record holds: what a run trained on, kept in summary.json
(`media_per_record`), so serving the trained model admits the records it was trained with (`mmtune serve`'s
media per prompt, vLLM's --limit-mm-per-prompt) instead of a default that refuses a 6-page document."""

from __future__ import annotations

from .records import media_parts

SUMMARY_KEY = "media_per_record"


def most_media_per_record(records) -> dict[str, int]:
    """kind -> the most items of that kind in one record (kinds no record holds are left out). Counts the
    parts of each record's messages (no media decoded): a record of 6 pages is {"image": 6}."""
    most: dict[str, int] = {}
    for r in records:
        counts: dict[str, int] = {}
        for p in media_parts(r.messages):
            counts[p["type"]] = counts.get(p["type"], 0) + 1
        for kind, n in counts.items():
            most[kind] = max(most.get(kind, 0), n)
    return dict(sorted(most.items()))
