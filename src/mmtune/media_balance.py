"""Every rank runs the same towers in each forward, under strategies that shard the weights (fsdp, zero3).

Why: with sharded weights a tower's forward gathers its weights from every rank (a collective). A batch
of text-only records skips the vision tower; if another rank's batch has an image, that rank waits in
the tower's all-gather for a rank that never comes: the run hangs (DeepSpeed ZeRO-3's known hang with
mixed text-only / image batches; FSDP has the same). DDP keeps whole weights per rank and has no
collective in the forward, so it needs none of this.

How: before each forward the ranks agree (one all-reduce) on which media kinds (image, video, audio)
any rank's batch holds; a batch lacking a kind that another rank has gets one extra row: a real record
of the training (or eval) set with only that kind, its labels all masked. The row runs through the tower
and the decoder like any other, so every collective is matched, and contributes nothing to the loss,
the answer-token count or the gradient (a masked row's loss is exactly zero). The extra rows are counted
(`dummy_rows`) so their cost is visible.
"""

from __future__ import annotations

from .errors import MMTuneError
from .loss import IGNORE_INDEX

# The media keys each kind brings to a batch: transformers' common names, and Phi-4-multimodal's own (its
# Family.media_keys), and the part type naming it in a record.
KIND_KEYS = {"image": ("pixel_values", "image_pixel_values"), "video": ("pixel_values_videos",),
             "audio": ("input_features", "audio_input_features")}
KINDS = tuple(KIND_KEYS)


def kinds_in_batch(batch: dict) -> set[str]:
    return {k for k, keys in KIND_KEYS.items() for key in keys if key in batch and batch[key].numel() > 0}


def kinds_of_record(record) -> set[str]:
    return {p.get("type") for m in record.messages for p in m.get("content", []) if isinstance(p, dict)} & set(KINDS)


def balance_for(run, records) -> MediaBalance | None:
    """A MediaBalance over `records` when the run's strategy shards the weights over several ranks and the
    model has media towers, else None (training and evaluation ask the same question)."""
    acc, towers = run.accelerator, set(run.encoder.modalities) & set(KINDS)
    if not shards_weights(run) or acc.num_processes < 2 or not towers:
        return None
    return MediaBalance(acc, records, run.encoder)


def shards_weights(run) -> bool:
    """fsdp / zero3 by train.strategy, or a ZeRO-3 engine from the user's own `accelerate launch --config_file`
    (the DeepSpeed config it carries says stage 3 whatever train.strategy says)."""
    if run.resolved.strategy in ("fsdp", "zero3"):
        return True
    plugin = getattr(getattr(run.accelerator, "state", None), "deepspeed_plugin", None)
    return plugin is not None and (plugin.deepspeed_config.get("zero_optimization") or {}).get("stage") == 3


class MediaBalance:
    """Adds masked rows so every rank's batch holds the same media kinds (see the module docstring).
    `prompt=True` (generation): rows of the record's prompt alone; the caller drops their outputs (the
    rows come after the real ones). Every rank must call `balance` as often as the others (a collective)."""

    def __init__(self, accelerator, records, encoder):
        self.acc, self.records, self.encoder = accelerator, records, encoder
        self._rows: dict[tuple[str, bool], dict] = {}
        self.dummy_rows = 0

    def _row(self, kind: str, prompt: bool) -> dict:
        if (kind, prompt) not in self._rows:
            rec = next((r for r in self.records if kinds_of_record(r) == {kind}), None)
            if rec is None:
                raise MMTuneError(f"no record with {kind} alone to keep the ranks' {kind} towers in step (every "
                                  f"{kind} record also holds another medium)", where="data.train / data.eval",
                                  fix="train.strategy=ddp (no collective in the forward), or add one record with "
                                      f"only {kind}")
            enc = self.encoder.encode_prompt(rec) if prompt else self.encoder.encode(rec)
            if "labels" in enc:
                import torch

                enc = {**enc, "labels": torch.full_like(enc["labels"], IGNORE_INDEX)}
            self._rows[kind, prompt] = enc
        return self._rows[kind, prompt]

    def agree(self, batches: list[dict]) -> list[set[str]]:
        """Per batch, the media kinds present on any rank (one all-reduce for all batches)."""
        import torch

        local = torch.tensor([[1.0 if k in kinds_in_batch(b) else 0.0 for k in KINDS] for b in batches],
                             device=self.acc.device).reshape(len(batches), len(KINDS))
        anyrank = self.acc.reduce(local, reduction="sum")
        return [{k for k, v in zip(KINDS, row.tolist()) if v > 0} for row in anyrank]

    def balance(self, batches: list[dict], collator, *, prompt: bool = False) -> list[dict]:
        """The batches with masked rows added where another rank has a kind this one lacks."""
        out = []
        for batch, wanted in zip(batches, self.agree(batches)):
            missing = sorted(wanted - kinds_in_batch(batch))
            if missing:
                if any(k.startswith("aux_") for k in batch):
                    raise MMTuneError("train.aux_losses cannot be combined with extra tower rows (a batch without "
                                      f"{', '.join(missing)} on this rank while another rank has it)",
                                      where="train.strategy", fix="train.strategy=ddp with train.aux_losses")
                extra = collator([self._row(k, prompt) for k in missing])
                batch = merge_batches(batch, extra, collator)
                self.dummy_rows += len(missing)
            out.append(batch)
        return out


def merge_batches(a: dict, b: dict, collator) -> dict:
    """Two collated batches as one: per-token keys ([rows, length] in both) padded to the longer and
    stacked (right padding for training, left for generation, as the collator does); media keys
    concatenated on dim 0 (how the collator batches them)."""
    import torch

    rows_a, len_a = a["input_ids"].shape
    rows_b, len_b = b["input_ids"].shape
    longest = max(len_a, len_b)
    merged = {}
    for key in list(a) + [k for k in b if k not in a]:
        va, vb = a.get(key), b.get(key)
        fill = collator.pad_token_id if key == "input_ids" else (IGNORE_INDEX if key == "labels" else 0)
        # A per-token key one side lacks (`loss_group`: the extra rows belong to no group) is filled on that side.
        if va is not None and vb is None and _per_token(va, rows_a, len_a):
            vb = torch.full((rows_b, len_b), fill, dtype=va.dtype)
        elif vb is not None and va is None and _per_token(vb, rows_b, len_b):
            va = torch.full((rows_a, len_a), fill, dtype=vb.dtype)
        per_token = all(v is not None and _per_token(v, r, n) for v, r, n in ((va, rows_a, len_a), (vb, rows_b, len_b)))
        if per_token:

            merged[key] = torch.cat([_pad(va, longest, fill, collator.padding_side),
                                     _pad(vb, longest, fill, collator.padding_side)], dim=0)
        elif va is None or vb is None:
            merged[key] = va if vb is None else vb
        elif hasattr(va, "dim"):
            merged[key] = torch.cat([va, vb.to(va.dtype)], dim=0)
        else:
            merged[key] = va  # non-tensor bookkeeping (e.g. bad-record lists) stays the real batch's
    return merged


def _per_token(v, rows: int, length: int) -> bool:
    return hasattr(v, "dim") and v.dim() == 2 and tuple(v.shape) == (rows, length)


def _pad(v, longest: int, fill: int, side: str):
    import torch

    p = torch.full((v.shape[0], longest - v.shape[1]), fill, dtype=v.dtype)
    return torch.cat([v, p] if side == "right" else [p, v], dim=1)
