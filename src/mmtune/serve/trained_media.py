"""What a finished run trained on, read back for serving: the most media of each kind one trained record held
(summary.json `media_per_record`, written by the training loop from data/media_per_record.py)."""

from __future__ import annotations

import json
from pathlib import Path

from ..data.media_per_record import SUMMARY_KEY


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
