"""Encoded records -> a batch, on the CPU only (failure mode 20: no CUDA in DataLoader workers).

Per-token keys (`input_ids`, `labels`, `attention_mask`, `mm_token_type_ids`, and any other 1-D
tensor as long as the record's `input_ids`) are padded to the longest record (on the right for
training; on the left for batched generation, so every answer starts at the same column): `input_ids` with
the pad id, `labels` with -100 (ignored by the loss), everything else with 0; a packed row's (4, tokens)
M-RoPE `position_ids` become (4, rows, tokens), as the model takes them (data/packing.py). Media tensors
(`pixel_values`, `image_grid_thw`, `input_features`, ...) index items or patches on dim 0 and are
concatenated, which is how the processors batch them themselves; (1, tokens, ...) tensors (Mllama's
`cross_attention_mask`) are padded on their token axis and with zeros on the rest. Floating tensors are cast to the
compute dtype here so the model never sees fp32 pixels next to bf16 weights (failure mode 4).

`model_mask=False` (the resolved run's `padding_mask`, resolve.decisions.decide_padding_mask): the padding mask is
kept as `token_mask`, which counts tokens and is never given to the model (loss.model_inputs), so a causal model
attends without a (seq x seq) mask; right padding only. A packed row has `token_mask` and no `attention_mask` anyway.
"""

from __future__ import annotations

from ..loss import TOKEN_MASK  # which positions are tokens, not padding; never a model input
from .batches import epoch_order  # one definition of the shuffle order, shared with resume

__all__ = ["Collator", "epoch_order", "make_dataloader"]

PAD_VALUES = {"labels": -100}
# Per-image tile masks whose first tile is on for every image slot, a padded one too (MllamaProcessor's
# build_aspect_ratio_mask): the vision encoder then never masks a whole attention row (a NaN in its softmax).
FIRST_TILE_ON = {"aspect_ratio_mask"}
# Audio features whose frame axis (the last) is each clip's own length (Qwen3-Omni's processor pads to the longest
# clip of its call, not to 30 s as Whisper's): zeros up to the batch's longest, as that processor pads a batch of
# clips itself; the model reads each clip's real frames by `feature_attention_mask`.
FRAME_PADDED = {"input_features", "feature_attention_mask"}


class Collator:
    def __init__(self, pad_token_id: int, compute_dtype=None, padding_side: str = "right", model_mask: bool = True):
        if padding_side not in ("right", "left"):
            raise ValueError(f"padding_side must be 'right' or 'left', not {padding_side!r}")
        if not model_mask and padding_side != "right":
            raise ValueError("a batch without its padding mask must be padded on the right (pads after every token)")
        self.pad_token_id = int(pad_token_id)
        self.compute_dtype = compute_dtype
        self.padding_side = padding_side
        self.model_mask = model_mask

    @classmethod
    def for_run(cls, resolved, compute_dtype=None) -> Collator:
        """The training collator's padding as the resolved run decided it (its pad id; the mask given or not)."""
        return cls(resolved.pad_token_id, compute_dtype, model_mask=resolved.padding_mask)

    def _fill(self, key: str) -> int:
        if key == "input_ids":
            return self.pad_token_id
        return PAD_VALUES.get(key, 0)

    def __call__(self, items: list[dict]) -> dict:
        import torch

        if not items:
            raise ValueError("cannot collate an empty batch")
        from .audio_in_video import FLAG, batch_flag

        items = [dict(it) for it in items]  # batch_flag pops the per-record flag: the caller's encodings stay whole
        av = batch_flag(items)
        keys = list(items[0])
        for it in items[1:]:
            if set(it) != set(keys):
                # e.g. an image record next to a text-only one: a mixed batch. Media keys of the records
                # that have them are concatenated; a key missing from a record contributes nothing.
                keys += [k for k in it if k not in keys]
        longest = max(int(it["input_ids"].shape[-1]) for it in items)
        batch = {}
        for key in keys:
            vals = [it[key] for it in items if key in it]
            # Packed rows' M-RoPE `position_ids` are (4, tokens): per token too, collated to (4, rows, tokens).
            per_token = all((v.dim() == 1 or key == "position_ids") and v.shape[-1] == it["input_ids"].shape[-1]
                            for it in items if key in it for v in [it[key]])
            if per_token and len(vals) == len(items) and vals[0].dim() == 1:
                # one C++ call per key (the row-by-row copy below cost ~0.05 ms a key on a short-text batch)
                batch[key] = torch.nn.utils.rnn.pad_sequence(vals, batch_first=True, padding_value=self._fill(key),
                                                             padding_side=self.padding_side)
            elif len(vals) == len(items) and all(_token_axis_1(v, it) for v, it in zip(vals, items)):
                batch[key] = self._pad_token_axis_1(vals, longest)
            elif per_token and len(vals) == len(items):
                fill = self._fill(key)
                out = torch.full((len(items), *vals[0].shape[:-1], longest), fill, dtype=vals[0].dtype)
                for row, v in enumerate(vals):
                    if self.padding_side == "right":
                        out[row, ..., : v.shape[-1]] = v
                    else:
                        out[row, ..., longest - v.shape[-1]:] = v
                batch[key] = out.movedim(0, 1).contiguous() if out.dim() == 3 else out
            else:
                vals = _pad_frames(vals) if key in FRAME_PADDED else vals
                cat = torch.cat(_pad_views([v if v.dim() else v.reshape(1) for v in vals]), dim=0)
                if key in FIRST_TILE_ON and cat.dim() == 3:
                    cat[..., 0] = 1
                if cat.is_floating_point() and self.compute_dtype is not None:
                    cat = cat.to(self.compute_dtype)
                batch[key] = cat
        if av:  # a video's own audio track: the model's M-RoPE puts its interleaved block on one time axis
            batch[FLAG] = True
        if not self.model_mask and "attention_mask" in batch:
            batch[TOKEN_MASK] = batch.pop("attention_mask")
        return batch

    def _pad_token_axis_1(self, vals: list, longest: int):
        """Pad the token axis (dim 1) to the longest record on the collator's side and every later axis (images,
        tiles) to the batch's most with zeros: a padded token or image is attended by nothing."""
        import torch

        most = [max(v.shape[d] for v in vals) for d in range(2, vals[0].dim())]
        out = torch.zeros((len(vals), longest, *most), dtype=vals[0].dtype)
        for row, v in enumerate(vals):
            n = v.shape[1]
            cols = slice(0, n) if self.padding_side == "right" else slice(longest - n, longest)
            out[(row, cols, *(slice(0, k) for k in v.shape[2:]))] = v[0]
        return out


def _token_axis_1(v, item) -> bool:
    """(1, tokens, ...) per-record tensors: Mllama's `cross_attention_mask` (1, tokens, images, tiles)."""
    return v.dim() >= 3 and v.shape[0] == 1 and v.shape[1] == item["input_ids"].shape[-1]


def _pad_frames(vals: list) -> list:
    import torch.nn.functional as F

    most = max(v.shape[-1] for v in vals)
    return [v if v.shape[-1] == most else F.pad(v, [0, most - v.shape[-1]]) for v in vals]


def _pad_views(vals: list) -> list:
    """Multi-view ("anyres") pixels are (images, views, C, H, W) with a view count that depends on each
    image's aspect ratio; pad the views with zeros to the batch's most, as the processors do when they
    batch several images themselves (the model keeps only each image's real views, by `image_sizes`)."""
    import torch.nn.functional as F

    # (1, images) ids and (1, images, tiles) masks (Mllama) pad like the views of (images, views, C, H, W)
    if len(vals) < 2 or any(v.dim() < 2 for v in vals) or len({v.shape[2:] for v in vals}) != 1:
        return vals
    most = max(v.shape[1] for v in vals)
    # F.pad lists (before, after) pairs from the last dim backwards; only dim 1 grows.
    return [v if v.shape[1] == most else F.pad(v, [0, 0] * (v.dim() - 2) + [0, most - v.shape[1]]) for v in vals]


def make_dataloader(dataset, collator, batch_sampler, *, plan=None, seed: int = 0):
    """The training DataLoader: `batch_sampler` decides the order (the loop's resumable stream), the
    collator runs in the workers. `plan` is the resolved run's LoaderPlan (data/workers.py: fork server
    or spawn, never fork from this process -- a forked worker cannot touch CUDA, failure mode 20;
    persistent, prefetch, pinned memory); None: no workers. The loader has its own generator: creating its
    iterator draws a seed, which must not consume the global RNG that resume restores (dropout would then
    differ after a resume)."""
    import torch

    from .workers import LoaderPlan

    return torch.utils.data.DataLoader(
        dataset, batch_sampler=batch_sampler, collate_fn=collator, **(plan or LoaderPlan()).loader_kwargs(),
        generator=torch.Generator().manual_seed(seed),
    )
