"""Runtime guarantees, verified on this config (failure modes 20-23): the loop makes these failures
impossible by construction; each check exercises the construction on this config's own model and data."""

from __future__ import annotations

from ..findings import error, info, warning
from ..registry import check


def _first_records(ctx, n=2):
    """The first training records the data scan passed (kept by the scan: no second read of the data)."""
    cfg = ctx.need("cfg")
    if not cfg.data.train:
        from ..context import NotAvailable

        raise NotAvailable("no data.train")
    scan = ctx.need("scan")
    records = [r for s in scan.splits if s.split == "train" for r in s.samples]
    if not records:
        from ..context import NotAvailable

        raise NotAvailable("no usable training record (see the data findings)")
    return records[:n]


@check("MM020", "batches are built on the CPU and can cross into spawned DataLoader workers",
       needs=("cfg", "processor_info"), failure_mode=20)
def cpu_collate(ctx):
    import pickle

    import torch

    from ...data.collate import Collator
    from ...errors import DataError

    cfg, resolved, encoder = ctx.need("cfg"), ctx.need("resolved"), ctx.need("encoder")
    records, encoded = [], []
    for r in _first_records(ctx, n=8):
        try:  # a record whose media fail to decode (outside the decode sample) is the data checks' finding
            encoded.append(encoder.encode(r))
        except DataError:
            continue
        records.append(r)
        if len(records) == 2:
            break
    if not records:
        from ..context import NotAvailable

        raise NotAvailable("no training record encodes (see the data findings)")
    collator = Collator.for_run(resolved, resolved.compute_dtype)
    batch = collator(encoded)
    yield from batch_device_findings(batch)
    if cfg.train.num_workers > 0:
        # Workers (fork server or spawn: data/workers.py) receive the dataset and collator by pickling;
        # the training process is never forked.
        from ...train.feed import EncodedDataset

        try:
            pickle.dumps((EncodedDataset(records, encoder), collator))
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            yield error(f"train.num_workers={cfg.train.num_workers} needs the dataset and collator to pickle "
                        f"into the DataLoader workers, and they do not: {type(e).__name__}: {e}",
                        where="train.num_workers", fix="train.num_workers=0")
    assert_no_cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    if assert_no_cuda:
        yield warning("CUDA was initialised while building a batch; forked workers would fail",
                      where="mmtune.data.collate", fix="train.num_workers=0")


def batch_device_findings(batch: dict):
    bad = [k for k, v in batch.items() if hasattr(v, "device") and v.device.type != "cpu"]
    if bad:
        yield error(f"the collator returns tensors off the CPU ({', '.join(bad)}): DataLoader workers that "
                    "touch CUDA fail in forked processes", where="mmtune.data.collate",
                    fix="collate on the CPU; move batches to the GPU in the training step")


def _text_batch(ctx):
    """(grad-model piece, adapted model, a text example batch of its processor) for MM021 / MM022."""
    from ..gradflow import example_batches

    g = ctx.need("grad_model")
    loaded = g.adapted.loaded
    return g, g.adapted.result.model, example_batches(loaded.processor, loaded.family, ["text"])["text"]


@check("MM021", "the loss extractor handles this model's output form", needs=("cfg", "grad_model"),
       failure_mode=21)
def output_forms(ctx):
    import torch

    g, model, batch = _text_batch(ctx)
    with torch.no_grad():
        out = model(**{k: v for k, v in batch.items() if k != "labels"}, use_cache=False)
    yield from output_form_findings(out, batch["input_ids"].shape, g.where("model output"))


def output_form_findings(out, input_shape, where="model output"):
    from ...loss import extract_logits

    forms = {"as returned": out}
    if hasattr(out, "to_tuple"):
        forms["tuple"] = out.to_tuple()
    if isinstance(out, dict):
        forms["dict"] = dict(out)
    for label, form in forms.items():
        try:
            logits = extract_logits(form)
        except TypeError as e:
            yield error(f"cannot extract logits from the model output ({label}): {e}", where=where,
                        fix="make the model return `logits` (ModelOutput/dict) or a tuple with (batch, seq, vocab)")
            continue
        if tuple(logits.shape[:2]) != tuple(input_shape):
            yield error(f"the logits found in the output ({label}) have shape {tuple(logits.shape)}, not "
                        f"(batch, seq, vocab) for inputs {tuple(input_shape)}", where=where,
                        fix="return logits first in tuple outputs")


@check("MM022", "the logged loss is a finite, non-zero fp32 token mean", needs=("cfg", "grad_model"),
       failure_mode=22)
def loss_value(ctx):
    import torch

    from ...loss import loss_sum
    from ..pieces import real_dtype

    g, model, batch = _text_batch(ctx)
    dtype = real_dtype(g.resolved)
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        total, n = loss_sum(model, batch)
    yield from loss_findings(total, int(n), g.where("train.step.loss_sum"))


def loss_findings(total, n: int, where="train.step.loss_sum"):
    import math

    import torch

    if n == 0:
        yield error("the batch has no answer tokens: every label is masked, the loss would be 0/0",
                    where=where, fix="check the answer masking of the data (the last assistant turn)")
        return
    if total.dtype != torch.float32:
        yield error(f"the loss is summed in {total.dtype}, not fp32: small per-token losses round to 0.0000 "
                    "in fp16", where=where, fix="upcast logits to fp32 before cross entropy")
    mean = float(total) / n
    if not math.isfinite(mean) or mean <= 0:
        yield error(f"the token-mean loss of a random-init forward is {mean}, expected a finite positive value "
                    f"(about ln(vocab))", where=where, fix="train.precision=bf16 (fp16 overflows); check labels")


@check("MM023", "the config in force is the one written, and resuming keeps it", needs=("cfg", "resolved"),
       fast=True, failure_mode=23)
def config_in_force(ctx):
    """The resume half compares like with like: the resolved config (what `mmtune train` runs, and what a
    checkpoint's config.json recorded) against the checkpoint train would resume, through the resume
    guard's own comparison (train/resume_guard.py), data fingerprint included. Comparing the user's
    config with config.resolved.yaml warned on every unchanged restart (automatic decisions differ)."""
    import os
    from pathlib import Path

    import yaml

    from ...config import dump_config
    from ...config.loader import validate

    cfg = ctx.need("cfg")
    text = dump_config(cfg)
    again = validate(yaml.safe_load(text))
    if again != cfg:
        yield error("the resolved config does not reload to the same settings; the written config would lie",
                    where="config", fix="this is a bug in mmtune; please report it")
    out = Path(cfg.output_dir)
    if not cfg.train.resume:
        return
    from ...errors import MMTuneError
    from ...train import resume_guard
    from ...train.checkpoint import newest_valid_checkpoint, read_meta

    ckpt, _ = newest_valid_checkpoint(out)  # the one train would resume (damaged newer ones: passed over)
    if ckpt is None:
        return
    effective = ctx.need("resolved").cfg
    try:
        meta = read_meta(ckpt)
        # the global batch only where the launch says how many processes there are (torchrun / accelerate
        # set WORLD_SIZE, as for `mmtune train`'s own pre-start check); a plain `mmtune doctor` does not know
        launched = ctx.need("resolved").target.processes if os.environ.get("WORLD_SIZE") else None
        diffs, fixed = resume_guard.compare(ckpt, effective, meta.get("data"), processes=launched)
    except MMTuneError as e:
        yield error(f"{out} holds {ckpt.name}, which mmtune train cannot resume: {e.what}", where="output_dir",
                    fix=e.fix or "train.resume=false to start over")
        return
    listed = ", ".join(list(diffs)[:6]) + (" ..." if len(diffs) > 6 else "")
    if fixed:
        yield error(f"{out} holds {ckpt.name} of a run whose {', '.join(fixed)} differ(s) from this config; mmtune "
                    f"train will refuse to resume it even with train.accept_changes=true ({next(iter(fixed.values()))})",
                    where="output_dir", fix=f"restore {', '.join(fixed)}; or output_dir={cfg.output_dir}-2 for a new "
                                            "run, or train.resume=false to start over")
    elif diffs and not cfg.train.accept_changes:
        # mmtune train refuses such a resume (train/resume_guard.py); say so before the GPU is rented.
        yield warning(f"{out} holds {ckpt.name} of a run with a different config or data ({listed}); mmtune train "
                      "will refuse to resume it", where="output_dir",
                      fix=f"output_dir={cfg.output_dir}-2 for a new run, train.resume=false to start over, or "
                          "train.accept_changes=true to continue with the new values")


@check("MM080", "under sharded weights (fsdp / zero3, or your own ZeRO-3 launch), records mixing media "
       "kinds keep every rank's towers in step",
       needs=("cfg", "resolved", "scan"))
def towers_in_step(ctx):
    """ZeRO-3 / FSDP gather a tower's weights from every rank in its forward: a rank whose batch has no
    image skips the vision tower while another waits in it (the known ZeRO-3 hang with mixed text-only and
    image batches). The loop prevents it (mmtune/media_balance.py: a masked row of a one-medium record
    added to a batch that lacks a kind another rank has); this check says when that happens and whether
    the data allows it."""
    from ...media_balance import KINDS
    from .distributed import deepspeed_launch

    cfg, resolved, scan = ctx.need("cfg"), ctx.need("resolved"), ctx.need("scan")
    launch = deepspeed_launch()
    user_zero3 = launch is not None and launch.zero_stage == 3  # `accelerate launch` with the user's ZeRO-3 file
    if resolved.strategy not in ("fsdp", "zero3") and not user_zero3:
        return
    how = f"train.strategy={resolved.strategy}" if resolved.strategy in ("fsdp", "zero3") else \
        "DeepSpeed ZeRO-3 (accelerate launch)"
    for split in scan.splits:
        sigs = {s for s, n in split.signatures.items() if n}
        if len(sigs) < 2:
            continue  # every record holds the same media kinds: every rank runs the same towers
        kinds = sorted({k for s in sigs for k in s.split("+") if k in KINDS})
        alone = [k for k in kinds if k in sigs]
        where = f"data.{split.split}"
        mix = ", ".join(f"{n} {s}" for s, n in sorted(split.signatures.items()) if n)
        if len(alone) < len(kinds):
            missing = [k for k in kinds if k not in alone]
            yield error(f"{split.split}: records mix media kinds ({mix}) under {how}, "
                        f"and no record holds {', '.join(missing)} alone: the loop cannot keep every rank's towers in "
                        "step (a rank without that kind would wait in another's all-gather)", where=where,
                        fix="train.strategy=ddp (no collective in the forward), or add one record with only "
                            + " / ".join(missing))
        elif cfg.train.aux_losses:
            yield error(f"{split.split}: records mix media kinds ({mix}) under {how} "
                        "with train.aux_losses: the masked tower rows that keep ranks in step carry no auxiliary "
                        "targets", where=where, fix="train.strategy=ddp with auxiliary losses")
        else:
            yield info(f"{split.split}: records mix media kinds ({mix}); under {how} "
                       "every rank must run the same towers in each step (ZeRO-3 / FSDP hang otherwise): the loop "
                       "adds a masked row of a one-medium record to a batch lacking a kind another rank has "
                       "(counted as tower_rows_added in summary.json)", where=where)
