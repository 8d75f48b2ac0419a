"""A micro-batch's records -> their encodings, with ONE processor (or tokenizer) call for all of them.

Why: the processor's fixed cost per call (kwargs merging and validation, ~0.3-0.5 ms on this 2-core CPU
for Qwen2-VL's) was paid once per record; the plain transformers loop pays it once per micro-batch.
The per-record work stays per record (chat template, answer spans, placeholder and media checks, media
decoding, the label mask), so each record's encoding is byte-identical to `Encoder.encode`'s
(tests/data/test_encode_batch.py checks it on every tiny family with image, video, audio and text records
mixed), and a bad record stays one record's problem.

The batched output is split back into records: per-token keys (the processor's (rows, tokens) tensors)
row by row without the padding; media keys by their items -- `pixel_values` rows by each item's patch
grid (`*_grid_thw`) where the processor flattens patches, otherwise dim 0 is one entry per item. A key
this does not know how to split, a processor that rejects the batch, or a record that fails after the
call (too long, labels not aligned): the records are encoded one by one instead (the same results, the
old cost), and a split that failed is not tried again by this encoder (`Encoder.batch_ok`).
"""

from __future__ import annotations

from .encode import Encoder
from .formats import BadRecord, isolated
from .records import MEDIA_TYPES

# Media keys -> the kind of item their dim 0 counts (a patch-level key: its item grid key as well).
ITEM_KIND = {"pixel_values": "image", "image_sizes": "image", "image_grid_thw": "image",
             "pixel_values_videos": "video", "video_grid_thw": "video", "second_per_grid_ts": "video",
             "input_features": "audio", "feature_attention_mask": "audio"}
PATCH_GRID = {"pixel_values": "image_grid_thw", "pixel_values_videos": "video_grid_thw"}
# Media kwargs that apply to one record's call as a whole: records with them are not merged into one call.
WHOLE_CALL_KWARGS = ("fps", "load_audio_from_video", "audio_from_video_indices")


class _Unsplittable(Exception):
    pass


def encode_many(encoder, records, *, check_length: bool = True) -> list:
    """[encoding dict, or the record's BadRecord] for each record, in order."""
    # Only the run's own Encoder is merged: a wrapper (an objective's PairEncoder / PromptEncoder) encodes
    # something else than prepare + complete give, and forwards batch_ok from the Encoder it wraps.
    # Raw-text documents carry their tokens (data/documents.py): nothing for a processor call to merge.
    if len(records) < 2 or type(encoder) is not Encoder or not encoder.batch_ok or any(r.document for r in records):
        return [_one(encoder, r, check_length) for r in records]
    results: list = [None] * len(records)
    ready = []  # (slot, record, text, spans, media kwargs)
    for slot, r in enumerate(records):
        try:
            with isolated(r.where()):  # the same record boundary as Encoder.encode's
                ready.append((slot, r, *encoder.prepare(r)))
        except BadRecord as e:
            results[slot] = e
    if len(ready) < 2 or any(kw and any(k in kw for k in WHOLE_CALL_KWARGS) for *_, kw in ready):
        for slot, r, *_ in ready:
            results[slot] = _one(encoder, r, check_length)
        return results
    try:
        outs, tokens = (_text_batch(encoder, ready) if encoder.text_only
                        else (_processor_batch(encoder, ready), _offsets_batch(encoder, ready)))
        done = [encoder.complete(r, text, spans, out, tok, check_length=check_length)
                for (_, r, text, spans, _), out, tok in zip(ready, outs, tokens or [None] * len(ready))]
    except _Unsplittable:
        encoder.batch_ok = False  # this processor's output: decided once, per record from now on
        done = None
    except Exception:  # noqa: BLE001 - the batched attempt only: encoding the records one by one below says
        done = None  # which record it is (or raises a setup error again), through Encoder.encode's boundary
    if done is None:
        done = [_one(encoder, r, check_length) for _, r, *_ in ready]
    for (slot, *_), d in zip(ready, done):
        results[slot] = d
    return results


def _one(encoder, record, check_length: bool):
    try:
        return encoder.encode(record, check_length=check_length)
    except BadRecord as e:
        return e


def _offsets_batch(encoder, ready) -> list[dict]:
    """Each text's tokens with their character offsets (what `Encoder._text_tokens` gives one record, the
    label mask's input), from one tokenizer call for all the texts: unpadded, each row is that text's own
    encoding. A media model's labels need them beside the processor's expanded ids: one call per
    micro-batch instead of one per record."""
    import numpy as np

    texts = [text for _, _, text, _, _ in ready]
    adds = {encoder._add_special(t) for t in texts}
    if len(adds) != 1:
        raise ValueError("records differ in whether the tokenizer adds special tokens")
    enc = encoder.tokenizer(texts, add_special_tokens=adds.pop(), return_offsets_mapping=True)
    return [{k: np.asarray(enc[k][i], dtype=np.int64) for k in enc} for i in range(len(texts))]


def _text_batch(encoder, ready) -> tuple[list[dict], list[dict]]:
    """A text-only model: one tokenizer call (ids and offsets) for all the texts; the ids are the encoding."""
    tokens = _offsets_batch(encoder, ready)
    return [encoder.text_tensors(t) for t in tokens], tokens


def _processor_batch(encoder, ready) -> list[dict]:
    """One processor call for all the records' texts and media; its output split back per record, each
    as `Encoder._run` returns it for one record (per-token keys (1, tokens))."""
    import torch

    texts = [text for _, _, text, _, _ in ready]
    adds = {encoder._add_special(t) for t in texts}
    if len(adds) != 1:
        raise ValueError("records differ in whether the tokenizer adds special tokens")
    merged: dict = {}
    counts = []  # per record: {kind: items}
    for *_, kw in ready:
        counts.append({"image": len(kw.get("images", ())), "video": len(kw.get("videos", ())),
                       "audio": len(kw.get("audio", ()))})
        for k, v in kw.items():
            if k in ("images", "videos", "audio", "video_metadata"):
                merged.setdefault(k, []).extend(v)
            elif k in merged and merged[k] != v:
                raise ValueError(f"records disagree on {k}: encoded one by one")
            else:
                merged[k] = v
    if "video_metadata" in merged and len(merged["video_metadata"]) != len(merged.get("videos", ())):
        raise ValueError("some videos have timing and some do not: encoded one by one")
    out = dict(encoder.processor(text=texts, add_special_tokens=adds.pop(), padding=True, return_tensors="pt", **merged))
    ids = out["input_ids"]
    rows = len(texts)
    mask = out.get("attention_mask")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[0] != rows or mask is None:
        raise _Unsplittable("input_ids are not (records, tokens) with an attention mask")
    keep = mask.bool()
    per: list[dict] = [{} for _ in range(rows)]
    for k, v in out.items():
        if not isinstance(v, torch.Tensor):
            raise _Unsplittable(f"{k} is not a tensor")
        if v.dim() == 2 and v.shape == ids.shape:  # per token: each row without its padding
            for i in range(rows):
                per[i][k] = v[i][keep[i]].reshape(1, -1)
            continue
        kind = ITEM_KIND.get(k)
        if v.dim() >= 5:  # multi-view ("anyres") pixels: the batch pads every image's views to its most
            raise _Unsplittable(f"{k} pads views across the batch")
        if kind is None:
            raise _Unsplittable(f"no rule to split {k}")
        n_items = [c[kind] for c in counts]
        grid = PATCH_GRID.get(k)
        if grid in out and isinstance(out[grid], torch.Tensor):
            sizes = out[grid].prod(dim=-1).tolist()  # each item's patches
            if sum(sizes) != v.shape[0] or len(sizes) != sum(n_items):
                raise _Unsplittable(f"{k} rows do not match {grid}")
            at, lens = 0, []
            for n in n_items:
                lens.append(int(sum(sizes[at:at + n])))
                at += n
        elif v.shape[0] == sum(n_items):
            lens = n_items
        else:
            raise _Unsplittable(f"{k} has {v.shape[0]} entries for {sum(n_items)} {kind} items")
        at = 0
        for i, n in enumerate(lens):
            if n:
                per[i][k] = v[at:at + n]
            at += n
    for i, c in enumerate(counts):  # a record without an item of a kind has no key for it (as `_run`'s output)
        for k in list(per[i]):
            if ITEM_KIND.get(k) in MEDIA_TYPES and not c[ITEM_KIND[k]]:
                del per[i][k]
    return per
