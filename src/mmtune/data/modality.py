"""A record's modality, and the loss split by modality of a run whose data mixes them (docs/data.md,
"Loss per modality").

A record's modality is the media it holds: "text" (none), "image", "video", "audio", or, for a record with
several kinds, their names joined in that order ("image+video", "video+audio"): such a record is its own group,
never counted as one of its kinds, so every group's loss is that of records alike. A video's own audio track
(`use_audio`) is part of the video: still "video".

The split is decided once per record set (`decide_for_run`): on when the set holds more than one modality, the groups
then being the modalities present in that set's order below; a one-modality set logs as before (no group key in
its batches, the loss path unchanged). Each encoded record then carries `loss_group` (mmtune.loss.LOSS_GROUP), one
small integer per token, which the collator pads and packing concatenates like any per-token key.
"""

from __future__ import annotations

from .records import MEDIA_TYPES

TEXT = "text"
MIXED = "mixed"  # a micro-batch of several groups whose loss came as one scalar (mmtune.loss.grouped_loss_sums)


def modality_of(record) -> str:
    kinds = {p.get("type") for m in record.messages for p in (m.get("content") or [])
             if isinstance(p, dict)} & set(MEDIA_TYPES)
    return "+".join(k for k in MEDIA_TYPES if k in kinds) or TEXT


def _order(name: str) -> tuple:
    """text first, then single kinds in MEDIA_TYPES order, then combinations."""
    parts = name.split("+")
    return (0 if name == TEXT else len(parts), [MEDIA_TYPES.index(p) if p in MEDIA_TYPES else 9 for p in parts])


def decide(records) -> tuple[tuple[str, ...], str]:
    """(the modalities of `records` in the order above, "image 12, text 30": the count of each)."""
    counts: dict[str, int] = {}
    for r in records:
        m = modality_of(r)
        counts[m] = counts.get(m, 0) + 1
    names = tuple(sorted(counts, key=_order))
    return names, ", ".join(f"{n} {counts[n]:,}" for n in names)


def decide_for_run(cfg, records, what: str) -> tuple[tuple[str, ...], str | None]:
    """The loss split of a run's training (`what`="data.train") or eval ("data.eval") records: (its groups, () when
    off; the resolved run's line, None when the set has one modality: nothing to decide, it logs as before). Off for
    dpo / grpo (their loss is not a sum over answer tokens) and for a training stream (its records are read as
    drawn, after step 1). Where the loss path gives one scalar per micro-batch (train.loss_impl=liger in training,
    model.loss=output) the line says how that scalar is attributed."""
    names, listed = decide(records)
    if len(names) < 2:
        return (), None
    head = f"{what}: records by modality {listed}: the loss is"
    if cfg.train.objective != "sft":
        return (), f"{head} logged whole (train.objective={cfg.train.objective}: no split by modality)"
    if what == "data.train" and cfg.data.streaming:
        return (), f"{head} logged whole (data.streaming reads the records as drawn, after step 1: no split)"
    scalar = ("model.loss=output (the model's own loss)" if cfg.model.loss == "output" else
              "train.loss_impl=liger (Liger's fused kernel)" if what == "data.train" and cfg.train.loss_impl == "liger"
              else None)
    key = "loss" if what == "data.train" else "eval_loss"
    if scalar is None:
        how = f"exact per answer token ({key}/<modality>, weighted by answer_tokens/<modality> they give {key})"
    else:
        how = (f"{scalar} gives one loss per micro-batch: it counts whole for its modality when its records share "
               f"one, else under {key}/{MIXED} ("
               + ("train.micro_batch_size=1 without data.packing" if key == "loss" else "eval.batch_size=1")
               + ": always exact)")
    return names, f"{head} also logged per modality ({', '.join(names)}): {how}"


def group_input(record, enc: dict, groups: tuple[str, ...]) -> dict:
    """{LOSS_GROUP: the record's group index at every token of `enc`} (int8: fewer than 128 groups)."""
    import torch

    from ..loss import LOSS_GROUP

    return {LOSS_GROUP: torch.full_like(enc["input_ids"], groups.index(modality_of(record)), dtype=torch.int8)}


__all__ = ["MIXED", "TEXT", "decide", "decide_for_run", "group_input", "modality_of"]
