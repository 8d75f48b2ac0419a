"""Data checks, all read from one streaming scan of the whole dataset (datascan.py).

A bad record is an error when `data.on_bad_record=error` (training would stop at it) and a warning
when it is `skip` (training skips and counts it). Each finding names the split, the count, the first
record (file:line) and the fix.
"""

from __future__ import annotations

import re
from collections import Counter

from ..findings import error, info, warning
from ..registry import check


def _bad_findings(ctx, code: str):
    cfg, scan = ctx.need("cfg"), ctx.need("scan")
    make = error if cfg.data.on_bad_record == "error" else warning
    for split, reason, n in scan.bad_by_code(code):
        where, what, fix = split.examples[reason][0]
        total = split.ok + split.n_bad
        extra = "" if cfg.data.on_bad_record == "error" else " (they will be skipped and counted)"
        yield make(f"{split.split}: {n} of {total} records: {reason}{extra}; first: {what}", where, _fix(fix, cfg, n, total))


def _fix(fix: str | None, cfg, n: int, total: int) -> str:
    """The record's fix, with skipping offered once, and not at all when every record of the split is bad
    (skipping them all leaves nothing to train on: MM031)."""
    fix = fix or ""
    if n >= total:
        return re.sub(r"[;,] or data\.on_bad_record=skip\b[^;]*", "", fix)
    if cfg.data.on_bad_record == "error" and "on_bad_record=skip" not in fix:
        fix += "; or data.on_bad_record=skip"
    return fix


@check("MM014", "records have the fields their format needs", needs=("cfg", "scan"), failure_mode=14)
def record_fields(ctx):
    yield from _bad_findings(ctx, "MM014")


@check("MM016", "media placeholders match media items", needs=("cfg", "scan"), failure_mode=16)
def placeholders(ctx):
    yield from _bad_findings(ctx, "MM016")


@check("MM018", "media files exist and decode to the end", needs=("cfg", "scan"), failure_mode=18)
def media_files(ctx):
    yield from _bad_findings(ctx, "MM018")
    for s in ctx.need("scan").splits:
        if not s.decode_sampled:
            continue
        n, total = s.decoded, s.media_records
        if s.decode_bad:
            rate = s.decode_bad / n
            yield info(f"{s.split}: media decoded for a random sample of {n:,} of {total:,} records with media; "
                       f"{s.decode_bad} failed (about {rate:.1%}, ~{round(rate * total):,} records in the split)",
                       where=f"data.{s.split}", fix="mmtune doctor --full (decodes all and counts them), "
                       "--write-clean PATH to keep only the rows that decode")
        else:
            yield info(f"{s.split}: media decoded for a random sample of {n:,} of {total:,} records with media, none "
                       f"failed: with 95% confidence fewer than {3 / n:.1%} of the split's media are corrupt",
                       where=f"data.{s.split}", fix="mmtune doctor --full decodes every record")


@check("MM033", "records only use modalities the model takes", needs=("cfg", "scan"))
def modalities(ctx):
    yield from _bad_findings(ctx, "MM033")
    from ...data.audio_in_video import mixed_kinds_error

    cfg = ctx.need("cfg")
    for s in ctx.need("scan").splits:
        where = "eval.batch_size" if s.split == "eval" else "train.micro_batch_size"
        size = cfg.eval.batch_size if s.split == "eval" else cfg.train.micro_batch_size
        e = mixed_kinds_error(s.video_audio, size, where, s.split)  # what training would refuse before step 1
        if e is not None:
            yield error(e.what, where=e.where, fix=e.fix)


@check("MM017", "no record exceeds data.max_length with its media tokens", needs=("cfg", "scan"),
       failure_mode=17)
def lengths(ctx):
    cfg, scan = ctx.need("cfg"), ctx.need("scan")
    yield from _bad_findings(ctx, "MM017")
    for s in scan.splits:
        if s.lengths:
            yield info(f"{s.split}: tokens per record (media included): min {min(s.lengths)}, median "
                       f"{s.percentile(0.5)}, p95 {s.percentile(0.95)}, max {max(s.lengths)} "
                       f"(data.max_length={cfg.data.max_length}); longest: {s.longest[1]}",
                       where=f"data.{s.split}")


@check("MM002", "media token counts: worst case of the dataset and the processor's pixel cap",
       needs=("cfg", "processor_info", "resolved"), failure_mode=2)
def media_tokens(ctx):
    cfg, pinfo = ctx.need("cfg"), ctx.need("processor_info")
    ip = getattr(pinfo.processor, "image_processor", None)
    # A pixel cap maps to tokens through patch x merge size (Qwen-VL, GLM-4.1V); tiling processors
    # (InternVL's GotOcr2: a fixed count per tile, capped by max_patches) have no such arithmetic.
    patch, merge = getattr(ip, "patch_size", None), getattr(ip, "merge_size", None)
    if (ip is not None and hasattr(ip, "get_number_of_image_patches") and isinstance(patch, int)
            and isinstance(merge, int) and not cfg.model.max_pixels):
        cap = ctx.need("resolved").media.max_pixels  # the cap the run's processor applies (resolve/processor.py)
        if cap:
            factor = patch * merge
            worst = cap // factor ** 2
            if worst > cfg.data.max_length // 2:
                fit = (cfg.data.max_length // 4) * factor ** 2
                yield warning(f"the processor allows up to {cap:,} pixels per image = up to {worst:,} tokens per "
                              f"image (video frames alike), against data.max_length={cfg.data.max_length}; one "
                              "large image can exhaust the sequence and the memory plan", where="model.max_pixels",
                              fix=f"model.max_pixels={fit}")
    scan = ctx._cache.get("scan")
    if scan is None and not ctx.fast and ctx.has("scan"):
        scan = ctx.need("scan")
    if scan is not None:
        for s in scan.splits:
            if s.media_tokens_max:
                yield info(f"{s.split}: at most {s.media_tokens_max:,} media tokens in one record "
                           f"({dict(s.modalities)} media items); `mmtune plan` plans with the longest record",
                           where=f"data.{s.split}")


@check("MM031", "the dataset covers an effective batch", needs=("cfg", "scan"))
def dataset_size(ctx):
    cfg, scan = ctx.need("cfg"), ctx.need("scan")
    yield from _eval_left(cfg, scan)
    train = next((s for s in scan.splits if s.split == "train"), None)
    if train is None or (train.sampled is not None and train.sampled_by == "--limit"):
        return  # only the first N rows were read: the split's size is not known
    n, mbs = train.ok, cfg.train.micro_batch_size
    if n < mbs:
        if not n and not train.rows:  # nothing to fix record by record: the file (or split) is empty
            yield error(f"train: {train.spec} holds no row at all: there is nothing to train on", where="data.train",
                        fix="point data.train at the file that holds the records (an empty file is often an export "
                            "that failed or a path to the wrong copy)")
            return
        yield error(f"train: {n} usable record(s), fewer than one micro-batch ({mbs})", where="data.train",
                    fix=f"train.micro_batch_size={max(1, n)}" if n else "fix the records reported above")
        return
    per_step = mbs * cfg.train.grad_accum
    if cfg.train.max_steps is None:  # train.epochs: the user chose the epochs; nothing to warn about
        return
    epochs = cfg.train.max_steps * per_step / n
    if epochs > 50:
        yield warning(f"train.max_steps={cfg.train.max_steps} x {per_step} records/step = {epochs:.0f} epochs of "
                      f"{n} records: the model will memorise them", where="train.max_steps",
                      fix=f"train.max_steps={max(1, int(3 * n / per_step))}")


def _eval_left(cfg, scan):
    """An eval split that keeps no record: every row refused (data.on_bad_record=skip), or none left after
    the split filter. Training would evaluate nothing and log eval_loss 0.0 (a sum over no tokens), so a
    run that looks evaluated is not (the empty-devset reports: https://github.com/OpenRLHF/OpenRLHF/pull/561,
    https://github.com/stanfordnlp/dspy/pull/10031)."""
    evals = [s for s in scan.splits if s.split == "eval"]
    if not evals or sum(s.ok for s in evals) or any(s.sampled for s in evals):
        return
    rows = sum(s.rows for s in evals)
    bad = Counter()
    for s in evals:
        bad.update(s.bad)
    why = (", ".join(f"{n} {r}" for r, n in bad.most_common(3)) if bad
           else "none of them in this split" if rows else "the split holds no row")
    spec = evals[0].spec
    yield error(f"eval: no usable record left ({rows} row(s) read; {why}): evaluation would run on nothing and "
                "log eval_loss 0.0", where=f"data.eval ({spec})",
                fix="fix the eval records reported above (or point data.eval at another split); without an eval "
                    "set, leave data.eval empty")


@check("MM034", "--write-clean: the records that pass were written", needs=("cfg", "scan"))
def clean_written(ctx):
    scan = ctx.need("scan")
    from pathlib import Path

    from ...data.globs import is_pattern, pattern_root

    for s in scan.splits:
        if s.clean_path is None:
            continue
        base = ctx.need("cfg").data.media_root or (None if s.spec.startswith("synthetic:") else str(
            pattern_root(s.spec) if is_pattern(s.spec) else Path(s.spec).parent))
        fix = f"data.{s.split}={s.clean_path}" + (f" data.media_root={base}" if base else "")
        if s.clean_unwritable:
            yield warning(f"{s.split}: {s.clean_unwritable} passing row(s) hold binary media and could not be "
                          f"written as JSON to {s.clean_path}", where=s.clean_path)
        if s.spec.startswith("synthetic:"):
            yield info(f"{s.split}: synthetic data is generated, not written", where=f"data.{s.split}")
        else:
            yield info(f"{s.split}: wrote {s.clean_written} passing row(s) to {s.clean_path}", where=s.clean_path,
                       fix=fix)


@check("MM060", "record text holds no special-token strings of the tokenizer", needs=("cfg", "scan"))
def special_token_text(ctx):
    """A record whose text holds e.g. '<|im_end|>' or '</s>' literally: the tokenizer turns the string
    into the control token itself, so the model would be trained to end (or open) a turn in mid-text. The
    encoder refuses such records ("special token in text", data/encode.py); this names them, as an error
    under data.on_bad_record=error (training stops at the first) and a warning under skip (counted)."""
    yield from _bad_findings(ctx, "MM060")


@check("MM061", "no eval record is a copy of a training record", needs=("cfg", "scan"))
def train_eval_leakage(ctx):
    """Records identical in every turn's text and media file between data.train and data.eval: the eval
    metrics then measure memorisation. A warning naming the count and the first copy."""
    for s in ctx.need("scan").splits:
        if s.split != "eval" or not s.leaked:
            continue
        total = s.ok + s.n_bad
        share = s.leaked / total if total else 0.0
        same = " (data.eval reads the same records as data.train)" if share == 1 else ""
        yield warning(f"eval: {s.leaked} of {total} records ({share:.0%}) are copies of training records (same "
                      f"turns and media files){same}: evaluation measures memorisation, not generalisation",
                      where=s.leaked_first,
                      fix="split the data so that no record is in both, e.g. hold out whole images / documents")


# Share of exact repeats in the training split from which MM068 warns (below it: an info with the count).
REPEAT_WARN_SHARE = 0.05


@check("MM068", "the training split holds few exact copies of its own records", needs=("cfg", "scan"))
def training_repeats(ctx):
    """Records identical in every turn's text and media file inside data.train: a generation script that
    wrote the same examples many times (instructlab#1003), merged sources that overlap (SkyThought#33).
    Each copy is trained once more per epoch, silently over-weighting it. A warning from 5 % of the
    split (the reports had 5 % and far more); fewer copies are an info with the count. Upsampling on
    purpose is done with weighted sources (data.train: [{path, weight}]), which this does not count."""
    for s in ctx.need("scan").splits:
        if s.repeated_ids:  # kept, all of them; said because predictions and per-record results name records by id
            yield info(f"{s.split}: {s.repeated_ids} record(s) repeat the id of an earlier record (all are used; "
                       "predictions.jsonl names records by id, so two of them read as one)", where=s.repeated_ids_first,
                       fix="give each record its own id (or drop the id field: records are then numbered)")
        if s.split != "train" or not s.repeated:
            continue
        total = s.ok + s.n_bad
        share = s.repeated / total if total else 0.0
        make = warning if share >= REPEAT_WARN_SHARE else info
        yield make(f"train: {s.repeated} of {total} records ({share:.1%}) repeat an earlier training record exactly (same "
                   "turns and media files): each copy is trained again every epoch, over-weighting those examples",
                   where=s.repeated_first,
                   fix="deduplicate the training file; to upsample on purpose give the source a weight "
                       "(data.train: [{path: ..., weight: 2}])")


@check("MM066", "video temporal positions match the rate the frames were sampled at",
       needs=("cfg", "scan", "resolved", "processor_info"))
def video_time_positions(ctx):
    """The encoder hands the processor each clip's real sampling rate (transformers' VideoMetadata: source
    fps, frame count, the indices taken; Omni's `fps`), so a video file's temporal positions / timestamps
    are those of its frames, uniform or fps sampling alike. What is still wrong: videos with no rate of
    their own -- a frames folder, in-memory frames -- get the processor's default rate, a guess. For the
    time-aware families a warning naming the count and the first record; silent for families without
    time positions and for data whose videos are all files."""
    scan, resolved = ctx.need("scan"), ctx.need("resolved")
    if not resolved.family.time_aware_video:  # Family.time_aware_video
        return
    yield from _frames_sharing_a_time(ctx, scan)
    untimed = [s for s in scan.splits if s.untimed_videos]
    if not untimed:
        return
    n = sum(s.untimed_videos for s in untimed)
    vp = getattr(ctx.need("processor_info").processor, "video_processor", None)
    # Without a rate the processor assumes its family's default (Family.default_fps); mmtune's CPU stand-in
    # video processor says its own (default_fps).
    assumed = float(getattr(vp, "default_fps", None) or resolved.family.default_fps)
    yield warning(f"{n} video item(s) are frames folders (or in-memory frames) with no frame rate: the processor "
                  f"builds {resolved.family.name}'s temporal positions for an assumed {assumed:g} fps, so durations "
                  "and moments in them are learned on a guessed time axis, without any error",
                  where=untimed[0].untimed_first,
                  fix="give these videos as files (mp4, webm, ...), which carry their frame rate, or extract the "
                      f"folders' frames at {assumed:g} fps")


def _frames_sharing_a_time(ctx, scan):
    """Qwen2.5-VL / Qwen2.5-Omni advance a video's temporal position by `tokens_per_second` (Omni:
    `position_id_per_seconds`) a second, one step per `temporal_patch_size` frames, and truncate it to an
    integer: frames sampled faster than tokens_per_second x temporal_patch_size a second give consecutive
    temporal patches the same position (https://github.com/QwenLM/Qwen3-VL/issues/1031), so the model cannot
    tell their order. Qwen3-VL writes timestamps as text instead and has no such attribute: silent."""
    hf = ctx.need("model_config")
    found = [c for c in (hf, getattr(hf, "thinker_config", None)) if c is not None]
    per_second = tps = None
    for c in found:
        per_second = per_second or getattr(c, "position_id_per_seconds", None) or getattr(
            getattr(c, "vision_config", None), "tokens_per_second", None)
        tps = tps or getattr(getattr(c, "vision_config", None), "temporal_patch_size", None)
    fastest = max((s.video_rate_max for s in scan.splits), default=(0.0, ""))
    if not per_second or not fastest[0]:
        return
    limit = float(per_second) * int(tps or 2)
    if fastest[0] > limit:
        yield warning(f"video frames sampled at up to {fastest[0]:.3g} fps: this model's temporal positions advance "
                      f"{per_second:g} a second, one step per {int(tps or 2)} frames, so above {limit:g} fps "
                      "consecutive frame groups get the same temporal position (the step is truncated to a whole "
                      "number) and the model cannot tell their order", where=fastest[1],
                      fix=f"model.video_fps={limit / 2:g} (at most {limit:g}), or fewer model.video_frames for short "
                          "clips")


@check("MM083", "preference pairs have a rejected answer and share the prompt's media", needs=("cfg", "scan"))
def preference_pairs(ctx):
    """A pair whose rejected side is missing (a dpo run on SFT records), malformed, or carries media of its
    own: the two sides would not be answers to the same prompt and image, so their margin means nothing."""
    yield from _bad_findings(ctx, "MM083")


@check("MM084", "preference pairs differ between chosen and rejected", needs=("cfg", "scan"))
def equal_pairs(ctx):
    """chosen == rejected: the pair's margin is 0 whatever the model does; DPO's gradient on it is a constant
    push that teaches nothing about the preference (a labelling or export slip)."""
    for s in ctx.need("scan").splits:
        if s.equal_pairs:
            make = warning if ctx.need("cfg").train.objective == "dpo" else info
            yield make(f"{s.split}: {s.equal_pairs} preference pair(s) whose chosen and rejected answers are the same "
                       "text: their margin is 0 whatever the model learns", where=s.equal_pairs_first,
                       fix="fix or drop these pairs (they train nothing about the preference)")


_BOX_FIX = {
    "grid1000": "write boxes on the 0-1000 grid: x * 1000 / image width, y * 1000 / image height (of the file; the "
                "grid does not move when the processor resizes)",
    "resized_pixels": "write boxes in pixels of the resized image: x * resized width / file width, y * resized height / "
                      "file height, with the resized size smart_resize gives at this run's model.max_pixels / "
                      "min_pixels (the sizes in each finding); keep those caps the same at inference",
}


@check("MM273", "grounding boxes in the records are in the model family's coordinate space",
       needs=("cfg", "scan", "resolved"))
def box_coordinates(ctx):
    """Qwen2-VL and Qwen3-VL read boxes on a 0-1000 grid, Qwen2.5-VL in pixels of the image after its processor's
    resize (Family.box_coordinates). Boxes in another space (the file's pixels, 0-1 fractions, Qwen2.5-VL data on
    Qwen3-VL, a max_pixels other than the one they were computed for) train with no error and the model learns
    shifted boxes. A box outside the space it should be in proves the mix-up: a warning per split, with the count,
    the first boxes and their image sizes (data/boxes.py)."""
    from ...data.boxes import KINDS

    space = ctx.need("resolved").family.box_coordinates
    for s in ctx.need("scan").splits:
        t = s.boxes
        if not t.off:
            continue
        kinds = "; ".join(f"{n} {KINDS[k]}" for k, n in t.off.most_common())
        first = next(iter(t.examples.values()))[0]
        shown = "; ".join(what for ex in t.examples.values() for _, what in ex[:1])
        name = ctx.need("resolved").family.name
        expects = "a 0-1000 grid of the image" if space == "grid1000" else "pixels of the image after the processor's resize"
        fix = "x1 <= x2 and y1 <= y2 in every box" if set(t.off) == {"inverted"} else _BOX_FIX[space]
        yield warning(f"{s.split}: {sum(t.off.values())} of {t.boxes} grounding box(es) are not in {name}'s space "
                      f"({expects}): {kinds}. The model learns boxes shifted by the mix-up, with no error. First: {shown}",
                      where=first[0], fix=fix)
