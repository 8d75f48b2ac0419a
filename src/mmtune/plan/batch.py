"""The batch a plan traces: the dataset's worst-case record, or declared media sizes when no data is given.

Batches go through the real `Encoder` and `Collator`, so token counts, grids (`image_grid_thw`,
`video_grid_thw`) and audio feature lengths are the values training will see. The worst case is the
record with the most tokens in total; a micro-batch of `micro_batch_size` copies of it is the largest
batch the loader can form (padding makes every row as long as the longest).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MEDIA = ("image", "video", "audio")


@dataclass
class Declared:
    """Media of the planned record when no data is given (`mmtune plan --image 1280x720 ...`)."""

    images: list[tuple[int, int]] = field(default_factory=list)  # (width, height)
    videos: list[tuple[int, int, int]] = field(default_factory=list)  # (frames, width, height)
    audio_seconds: list[float] = field(default_factory=list)
    tokens: int | None = None  # total tokens of the record; defaults to data.max_length
    # the data's record lengths (tokens), when the run's records vary: its batches are replayed at their own
    # lengths through the fixed-segment allocator (plan/run_growth.py); the worst case stays `tokens`
    lengths: list[int] | None = None

    @classmethod
    def default_for(cls, modalities) -> Declared:
        d = cls()
        if "image" in modalities:
            d.images = [(512, 512)]
        elif "audio" in modalities:
            d.audio_seconds = [30.0]
        return d

    def describe(self) -> str:
        parts = [f"image {w}x{h}" for w, h in self.images]
        parts += [f"video {f}x{w}x{h}" for f, w, h in self.videos]
        parts += [f"audio {s:g}s" for s in self.audio_seconds]
        return ", ".join(parts) or "text only"


@dataclass
class PlanBatch:
    micro_batch: dict  # collated real CPU tensors (micro_batch_size rows)
    tokens: int  # tokens per row
    media_tokens: dict  # kind -> {"max", "p95", "mean"} per record
    source: str  # where the shape came from
    records_seen: int = 0
    skipped: dict = field(default_factory=dict)
    lengths: list[int] = field(default_factory=list)  # every scanned record's tokens (run_growth.py), data order
    # The eval batch: eval.max_new_tokens decided from these records' answers when the config leaves it unset
    # (resolve/generation_budget.py: the rule training applies to the same records), else None.
    generation: object = None


def _stats(values: list[int]) -> dict:
    if not values:
        return {"max": 0, "p95": 0, "mean": 0.0}
    s = sorted(values)
    return {"max": s[-1], "p95": s[min(len(s) - 1, math.ceil(0.95 * len(s)) - 1)], "mean": sum(s) / len(s)}


def _media_counts(encoder, item: dict) -> dict:
    ids = item["input_ids"]
    return {k: int((ids == encoder.media_token_id[k]).sum()) if k in encoder.media_token_id else 0 for k in MEDIA}


def _declared_record(decl: Declared):
    import numpy as np
    from PIL import Image

    from ..data.records import Record

    _check_declared(decl, Image.MAX_IMAGE_PIXELS)
    content = []
    for w, h in decl.images:
        content.append({"type": "image", "image": Image.new("RGB", (w, h), (127, 127, 127))})
    for f, w, h in decl.videos:
        content.append({"type": "video", "video": [Image.new("RGB", (w, h), (127, 127, 127)) for _ in range(f)]})
    for s in decl.audio_seconds:
        content.append({"type": "audio", "audio": np.zeros(int(s * 16000), dtype=np.float32), "sampling_rate": 16000})
    content.append({"type": "text", "text": "Describe it."})
    return Record("declared", "plan --declared", [{"role": "user", "content": content},
                                                  {"role": "assistant", "content": [{"type": "text", "text": "It is."}]}])


def _fill_to(item: dict, n: int, fill_id: int) -> dict:
    """Extend a record's per-token keys with plain text tokens (answer tokens) up to `n` tokens."""
    import torch

    cur = int(item["input_ids"].shape[-1])
    if n <= cur:
        return item
    extra = n - cur
    out = dict(item)
    for k, v in item.items():
        if v.dim() == 1 and v.shape[0] == cur:
            name = k.removeprefix("rejected_")  # a declared dpo pair's rejected side grows alike
            val = fill_id if name in ("input_ids", "labels") else (1 if name == "attention_mask" else 0)
            out[k] = torch.cat([v, torch.full((extra,), val, dtype=v.dtype)])
    return out


def _fill_id(tok, item: dict) -> int:
    """The text token a record is lengthened with: "a", or the record's last token where "a" is unknown."""
    fill = tok.convert_tokens_to_ids("a")
    return int(item["input_ids"][-1]) if fill is None or fill == tok.unk_token_id else int(fill)


def describe_spec(spec) -> str:
    """A data spec in words: a path, or a mixture's sources by name."""
    if isinstance(spec, list):
        return "mixture " + " + ".join(getattr(src, "name", None) or str(src) for src in spec)
    return str(spec)


def worst_case_batch(resolved, *, declared: Declared | None = None, max_records: int = 5000,
                     spec: str | None = None, micro_batch_size: int | None = None,
                     packed: bool | None = None) -> PlanBatch:
    """`micro_batch_size` copies of the longest record of `spec` (default: the run's training data), found
    by the one length engine (`Encoder.measure`, no pixels decoded) and then encoded for real; or the
    declared media when there is no data. `packed` (default: data.packing for the training batch; a batch
    that names its own `micro_batch_size` -- evaluation's, never packed -- is not): a full packed row."""
    import torch

    from ..data.collate import Collator
    from ..data.encode import Encoder
    from ..errors import DataError

    cfg, family = resolved.cfg, resolved.family
    from ..data.preference import train_collator, train_encoder

    # The training batch as the objective holds it (dpo: both sides of each pair); evaluation's is the run's.
    training = micro_batch_size is None
    enc = train_encoder(resolved, Encoder.for_run(resolved)) if training else Encoder.for_run(resolved)
    tok = enc.tokenizer
    collate = train_collator(resolved, Collator.for_run(resolved)) if training else Collator.for_run(resolved)
    mb = micro_batch_size or cfg.train.micro_batch_size
    # The eval split only when another spec is given: a mixture's eval sources can equal its train sources.
    split = "eval" if spec is not None and spec is not cfg.data.train else "train"
    packed = cfg.data.packing and micro_batch_size is None if packed is None else packed
    spec = spec or cfg.data.train
    if spec and declared is None:
        from ..data.encode_cache import key
        from ..data.sources import load_records
        from ..data.text_windows import windowed

        rs = windowed(load_records(spec, cfg.data, split=split), enc, cfg.data.on_bad_record)  # raw text: windows
        if not rs.records:
            raise DataError("the training set has no usable record to plan with", where=describe_spec(spec),
                            fix="check data.train; skipped: " + str(rs.skipped))
        # A mixture repeats its records (100k samples of a few thousand records): each distinct record
        # is measured once, as the training scan does; the first `max_records` distinct ones are scanned.
        distinct: dict[str, object] = {}
        for r in rs.records:
            distinct.setdefault(key(r), r)
        records = list(distinct.values())[:max_records]
        worst, worst_n, counts, lengths, good = None, -1, {k: [] for k in MEDIA}, [], []
        skipped = dict(rs.skipped)
        for r in records:
            try:
                c = enc.measure(r)
                if c["total"] > cfg.data.max_length:
                    enc.encode(r)  # raises the "too long" BadRecord with its fix
            except DataError as e:
                if cfg.data.on_bad_record == "skip":
                    reason = getattr(e, "reason", "bad record")
                    skipped[reason] = skipped.get(reason, 0) + 1
                    continue
                raise
            for k in MEDIA:
                counts[k].append(c[k])
            lengths.append(int(c["total"]))
            good.append(r)
            if c["total"] > worst_n:
                worst, worst_n = r, c["total"]
        if worst is None:
            raise DataError("no record of the training set can be planned with (all skipped)",
                            where=describe_spec(spec), fix="see `mmtune data inspect CONFIG`; skipped: " + str(skipped))
        item = enc.encode(worst)
        scanned = f"{len(records)} records measured" + (f" of {len(distinct)}" if len(distinct) > len(records) else "")
        if len(distinct) < len(rs.records):
            scanned += f"; {len(rs.records)} samples"
        src = f"worst-case record of {describe_spec(spec)} ({worst_n} tokens; {scanned})"
        # Records past the measured ones are drawn too, and one of them may be the longest: a run planned at the
        # prefix's worst fits step 1 and dies when that record arrives. What bounds every record the run trains
        # on is the sequence cap (longer ones are refused or skipped), so the unmeasured rest is planned at it.
        # (grpo: a record's length counts its completion budget; the batch holds the prompt, filled to the rest)
        if len(distinct) > len(records) and worst_n < cfg.data.max_length:
            budget = cfg.train.grpo.max_completion_length if training and cfg.train.objective == "grpo" else 0
            item = _fill_to(item, cfg.data.max_length - budget, _fill_id(tok, item))
            src += (f"; the {len(distinct) - len(records)} records not measured may be as long as the "
                    f"{cfg.data.max_length}-token cap (data.max_length): planned at it")
            worst_n = cfg.data.max_length
        if packed:
            item, worst_n, src = _packed_row(item, enc, resolved, src)
        from ..resolve import generation_budget

        generation = generation_budget.decide(cfg, enc, good) if split == "eval" else None
        return PlanBatch(_collated(collate, item, mb, training), worst_n, {k: _stats(v) for k, v in counts.items()}, src,
                         len(records), skipped, lengths, generation)
    decl = declared or Declared.default_for(family.modalities)
    record = _declared_record(decl)
    if training and cfg.train.objective == "dpo":  # a declared pair: both sides as long as the declared answer
        record.rejected = record.messages[-1]["content"]
    item = enc.encode(record, check_length=False)
    n_media = int(item["input_ids"].shape[-1])
    target = decl.tokens or cfg.data.max_length
    if n_media > target:
        raise DataError(f"the declared media ({decl.describe()}) alone take {n_media} tokens, over the "
                        f"{target}-token sequence cap", where="plan --image/--video/--audio",
                        fix=f"raise data.max_length to at least {n_media}, or lower model.max_pixels / the sizes")
    fill = _fill_id(tok, item)
    # grpo: the declared tokens are the prompt's and the completion's; the batch holds the prompt alone
    budget = cfg.train.grpo.max_completion_length if training and cfg.train.objective == "grpo" else 0
    if budget and n_media + budget > target:
        raise DataError(f"the declared media ({decl.describe()}) take {n_media} tokens: with "
                        f"train.grpo.max_completion_length={budget} that is over the {target}-token sequence cap",
                        where="plan --image/--video/--audio", fix=f"raise data.max_length to at least {n_media + budget}")
    item = _fill_to(item, target - budget, int(fill))
    counts = _media_counts(enc, item)
    src = f"declared: {decl.describe()}, {target} tokens per record" + (
        f" ({target - budget}-token prompt + {budget} completion tokens)" if budget else "")
    del torch
    if packed:
        item, target, src = _packed_row(item, enc, resolved, src)
    return PlanBatch(_collated(collate, item, mb, training), target, {k: _stats([v]) for k, v in counts.items()}, src, 1, {},
                     list(decl.lengths or []))


def _packed_row(item: dict, enc, resolved, src: str) -> tuple[dict, int, str]:
    """data.packing: the worst row is full -- as many copies of the worst record as fit in data.max_length,
    the rest filled with answer tokens -- packed as training packs (data/packing.py). M-RoPE positions are
    the per-record text count on all three axes here: position values change no tensor's size."""
    import torch

    from ..data.packing import pack_row

    cap, n = resolved.cfg.data.max_length, int(item["input_ids"].shape[-1])
    copies = [item] * max(1, cap // n)
    tok = enc.tokenizer
    fill = _fill_id(tok, item)
    copies[-1] = _fill_to(item, cap - n * (len(copies) - 1), fill)
    def text_count(it):
        return torch.arange(it["input_ids"].shape[-1]).expand(3, -1)

    row = pack_row(copies, text_count if resolved.family.mrope else None)  # M-RoPE: (4, tokens) positions
    return row, cap, f"{src}; packed: {len(copies)} cop{'y' if len(copies) == 1 else 'ies'} filled to {cap} tokens"


def _collated(collate, item: dict, mb: int, training: bool):
    """The planned micro-batch: `mb` copies of the worst record, collated here in host memory (the trace needs its
    values: grid sizes, position ids). A batch larger than half this machine's available RAM is refused with the key
    instead of the allocator's "can't allocate memory" (train.micro_batch_size=100000 on an image model: 30 GB)."""
    import torch

    from ..host_memory import host_ram_bytes

    per = sum(v.nbytes for v in item.values() if isinstance(v, torch.Tensor))
    _, available = host_ram_bytes()
    if available is not None and per * mb > available // 2:
        from ..errors import ConfigError

        key = "train.micro_batch_size" if training else "eval.batch_size"
        raise ConfigError(f"{key}={mb}: the planned micro-batch is {per * mb / 2**30:.1f} GiB of inputs "
                          f"({per / 2**20:.2f} MiB per record), more than half of this machine's available RAM "
                          f"({available / 2**30:.1f} GiB) to build and trace", where=key,
                          fix=f"plan a smaller {key} (no GPU holds such a batch either)")
    return collate([item] * mb)


def _check_declared(decl: Declared, max_image_pixels: int | None) -> None:
    """Declared media the planner can build here: an image no larger than a file PIL would open (it refuses one past
    twice Image.MAX_IMAGE_PIXELS as a decompression bomb, so no record can hold it), and media that take at most half
    this machine's available RAM as the planner holds them (RGB frames, float32 samples). Before:
    `mmtune plan --image 99999x99999` allocated 30 GB and was killed by the kernel's out-of-memory killer."""
    from ..errors import ConfigError
    from ..host_memory import host_ram_bytes

    where = "plan --image/--video/--audio"
    cap = 2 * max_image_pixels if max_image_pixels else None
    for *frames, w, h in list(decl.images) + list(decl.videos):
        if w < 1 or h < 1 or (frames and frames[0] < 1):
            raise ConfigError(f"a declared {'video' if frames else 'image'} of {'x'.join(map(str, (*frames, w, h)))} "
                              "has no pixels", where=where, fix="give sizes of at least 1, e.g. 1280x720 or 8x640x360")
        if cap and w * h > cap:
            raise ConfigError(f"a declared image or frame of {w}x{h} is {w * h / 1e6:,.0f} Mpx: past the {cap / 1e6:.0f} Mpx "
                              "PIL opens (a file that large is refused as a decompression bomb, so no record holds it)",
                              where=where, fix="declare the size the data's largest image has")
    if any(not 0 < s < float("inf") for s in decl.audio_seconds):
        raise ConfigError(f"declared audio lengths must be positive seconds (got {list(decl.audio_seconds)})", where=where)
    held = sum(w * h * 3 for w, h in decl.images) + sum(f * w * h * 3 for f, w, h in decl.videos)
    held += sum(int(s * 16000) * 4 for s in decl.audio_seconds)
    _, available = host_ram_bytes()
    if available is not None and held > available // 2:
        raise ConfigError(f"the declared media take {held / 2**30:.1f} GiB to build here (RGB frames, 16 kHz float32 "
                          f"audio), more than half this machine's available RAM ({available / 2**30:.1f} GiB)",
                          where=where, fix="declare fewer frames or shorter audio: the model's own caps "
                                           "(model.video_frames, model.audio_max_seconds) bound a record anyway")
