"""The most media items of each kind one record holds: what a run trained on, kept in summary.json
(`media_per_record`), so serving the trained model admits the records it was trained with (`mmtune serve`'s
media per prompt, vLLM's --limit-mm-per-prompt) instead of a default that refuses a 6-page document."""

from __future__ import annotations

import json
from pathlib import Path

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


def trained_media_per_record(target) -> tuple[dict[str, int], str] | None:
    """(kind -> most items per trained record, the summary.json it was read from) for a run folder, one of
    its checkpoints or an export written inside one (or whose marker names its checkpoint); None elsewhere
    (a hub id, a folder without its run, a run that has not finished)."""
    from ..export.origin import export_checkpoint

    p = Path(str(target)).expanduser()
    if not p.exists():
        return None
    p = p.resolve()
    folders = [p, p.parent, p.parent.parent]
    origin = export_checkpoint(p)
    if origin is not None:
        folders += [origin, origin.parent]
    for folder in folders:
        summary = folder / "summary.json"
        if summary.is_file():
            try:
                most = json.loads(summary.read_text()).get(SUMMARY_KEY)
            except (OSError, ValueError, AttributeError):
                return None
            if isinstance(most, dict):
                return {str(k): int(v) for k, v in most.items()}, str(summary)
            return None
    return None
