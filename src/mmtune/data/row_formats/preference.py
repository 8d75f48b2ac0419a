"""data.format=preference: preference pairs (data/preference.py): TRL's prompt/chosen/rejected, LLaMA-Factory's
ranking sharegpt, RLAIF-V's question/chosen/rejected/image."""

from __future__ import annotations

from ..records import Record

FIELDS = {"prompt": ("prompt", "conversations", "messages", "question", "query"), "chosen": ("chosen",),
          "rejected": ("rejected",), "images": ("images", "image"), "videos": ("videos", "video"),
          "audios": ("audios", "audio"), "id": ("id", "idx")}


def to_records(row, fmt, columns, where, index, rid, resolve, templates=None) -> list[Record]:
    from ..preference import pair_records

    return pair_records(row, columns, where, index, resolve)
