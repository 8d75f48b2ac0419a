"""Data checks, all read from one streaming scan of the whole dataset (datascan.py).

A bad record is an error when `data.on_bad_record=error` (training would stop at it) and a warning
when it is `skip` (training skips and counts it). Each finding names the split, the count, the first
record (file:line) and the fix.
"""

from __future__ import annotations

from ..findings import error, info, warning
from ..registry import check


def _bad_findings(ctx, code: str):
    cfg, scan = ctx.need("cfg"), ctx.need("scan")
    make = error if cfg.data.on_bad_record == "error" else warning
    for split, reason, n in scan.bad_by_code(code):
        where, what, fix = split.examples[reason][0]
        total = split.ok + split.n_bad
        extra = "" if cfg.data.on_bad_record == "error" else " (they will be skipped and counted)"
        yield make(f"{split.split}: {n} of {total} records: {reason}{extra}; first: {what}", where,
                   (fix or "") + ("; or data.on_bad_record=skip" if cfg.data.on_bad_record == "error" else ""))


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
    if ip is not None and hasattr(ip, "get_number_of_image_patches") and not cfg.model.max_pixels:
        cap = ctx.need("resolved").media.max_pixels  # the cap the run's processor applies (resolve/processor.py)
        if cap:
            factor = ip.patch_size * ip.merge_size
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
    train = next((s for s in scan.splits if s.split == "train"), None)
    if train is None:
        return
    n, mbs = train.ok, cfg.train.micro_batch_size
    if n < mbs:
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


@check("MM034", "--write-clean: the records that pass were written", needs=("cfg", "scan"))
def clean_written(ctx):
    scan = ctx.need("scan")
    from pathlib import Path

    for s in scan.splits:
        if s.clean_path is None:
            continue
        base = ctx.need("cfg").data.media_root or (str(Path(s.spec).parent) if not s.spec.startswith("synthetic:") else None)
        fix = f"data.{s.split}={s.clean_path}" + (f" data.media_root={base}" if base else "")
        if s.clean_unwritable:
            yield warning(f"{s.split}: {s.clean_unwritable} passing row(s) hold binary media and could not be "
                          f"written as JSON to {s.clean_path}", where=s.clean_path)
        if s.spec.startswith("synthetic:"):
            yield info(f"{s.split}: synthetic data is generated, not written", where=f"data.{s.split}")
        else:
            yield info(f"{s.split}: wrote {s.clean_written} passing row(s) to {s.clean_path}", where=s.clean_path,
                       fix=fix)
