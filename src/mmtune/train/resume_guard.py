"""Resume is exact or refused: the checkpoint's config against the config in force now.

A resumed run that silently keeps the old learning rate while config.resolved.yaml shows the new one,
or whose schedule jumps because max_steps changed, is not the run anyone asked for. Settings that
change what the run means are compared; a difference is an error listing each one, unless
`train.accept_changes=true` says it is on purpose -- then the new values are applied for real
(optimizer hyperparameters, schedule, batch position) and recorded in metrics.jsonl and summary.json.

The data is compared too, not only its name: the checkpoint's data fingerprint (train/data_fingerprint.py:
files' paths, sizes, modification times, first and last records; media roots) against the data as it is
now. Some changes cannot be applied to a checkpoint at all -- the adapter's rank, targets or method decide
which tensors exist and their shapes -- and are refused even with accept_changes, with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

# Keys whose change alters the run's meaning. Everything else (logging, eval, save cadence, workers,
# device choice) may change between a run and its resume.
MEANING: dict[str, tuple[str, ...] | None] = {
    "model": ("name", "class", "factory", "processor", "components", "loss", "revision", "family",
              "max_pixels", "min_pixels", "video_frames", "video_fps",
              "audio_max_seconds"),
    "data": ("train", "format", "columns", "media_root", "dataset_info", "mixture_size", "mixture_seed", "max_length",
             "system_prompt", "synthetic_train_size", "synthetic_seed", "group_by_length", "packing", "streaming",
             "shuffle_buffer", "startup_scan"),
    "adapter": None,  # every adapter key
    # stages: which parameters each step updates, and its LR multiplier; aux_losses: what the step
    # minimises. Either changes the run from the checkpoint on, so both are compared like the LR.
    "train": ("max_steps", "micro_batch_size", "grad_accum", "lr", "weight_decay", "optimizer", "scheduler",
              "warmup_steps", "max_grad_norm", "precision", "seed", "stages", "aux_losses"),
}

# What a key meant before it existed: a checkpoint saved before train.stages / train.aux_losses /
# model.loss were settings had none of the first two and mmtune's own loss, the same run as now.
# Changes no resume can apply, whatever accept_changes says: they decide which tensors the checkpoint
# holds and their shapes, so its weights and optimizer state have no place in the new run.
CANNOT_APPLY = {
    "adapter.method": "the checkpoint trained other parameters (LoRA matrices or the whole model)",
    "adapter.r": "the rank is the adapter matrices' size: the saved LoRA tensors do not fit matrices of another rank",
    "adapter.target_modules": "other layers would carry adapters: the saved tensors and optimizer state belong to "
                              "the old set",
    "adapter.use_dora": "DoRA adds a magnitude vector per adapted layer, which the checkpoint has or lacks",
    "adapter.train_components": "another set of parameters would train: the optimizer state belongs to the old set",
    "adapter.freeze_components": "another set of parameters would train: the optimizer state belongs to the old set",
}

ABSENT_MEANS = {"data.media_root": None, "data.dataset_info": None, "data.mixture_size": None, "data.mixture_seed": 0,
                "train.stages": [], "train.aux_losses": [], "model.loss": "logits", "data.streaming": False,
                "data.shuffle_buffer": 1000, "data.startup_scan": "auto"}


def differences(saved: dict, now: dict) -> dict[str, tuple]:
    """{dotted key: (saved value, value now)} for every meaning-bearing key that differs."""
    diffs = {}
    for section, keys in MEANING.items():
        a, b = saved.get(section, {}) or {}, now.get(section, {}) or {}
        a, b = (a if isinstance(a, dict) else {}), (b if isinstance(b, dict) else {})
        for k in (keys if keys is not None else sorted(set(a) | set(b))):
            default = ABSENT_MEANS.get(f"{section}.{k}")
            old, new = a.get(k, default), b.get(k, default)
            if old != new:
                diffs[f"{section}.{k}"] = (old, new)
    return diffs


def saved_config(ckpt: Path) -> dict | None:
    """The config a checkpoint was written with, or None (before configs were saved with it). A file that
    is not a JSON object is a ConfigError naming it (the manifest verified it, so it was edited)."""
    from ..errors import ConfigError

    path = ckpt / "config.json"
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        saved = e
    if not isinstance(saved, dict):
        raise ConfigError(f"{path} cannot be read as the config that wrote {ckpt.name}", where=str(path),
                          fix="start over with train.resume=false, or move this checkpoint out of the run folder "
                              "to resume from the one before")
    return saved


def compare(ckpt: Path, cfg, saved_data: dict | None, now_data: dict | None = None,
            processes: int | None = None) -> tuple[dict[str, tuple], dict[str, str]]:
    """(every difference {key: (then, now)}, those no resume can apply {key: why}) between a checkpoint
    and the config in force (the resolved one: what train runs and what the checkpoint recorded) with
    the data as it is now, and -- `processes` given -- the global batch on this many processes. Used by
    train and by the doctor's MM023 alike."""
    from .data_fingerprint import changes, fingerprint

    saved = saved_config(ckpt)
    diffs = differences(saved, cfg.model_dump(mode="json")) if saved is not None else {}
    diffs.update(changes(saved_data, now_data if now_data is not None else fingerprint(cfg)))
    diffs.update(global_batch_change(ckpt, saved, cfg, processes))
    return diffs, {k: CANNOT_APPLY[k] for k in diffs if k in CANNOT_APPLY}


GLOBAL_BATCH = "train.global_batch"  # micro-batch x accumulation x processes: not a key of its own


def saved_processes(ckpt: Path) -> int | None:
    """How many processes wrote the checkpoint (its state.json records it); None where it does not say."""
    try:
        tree = json.loads((ckpt / "state.json").read_text(encoding="utf-8")).get("tree")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    n = tree.get("world_size") if isinstance(tree, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def _batch(processes: int, micro: int, accum: int) -> str:
    return f"{processes * micro * accum} per step ({processes} process(es) x micro-batch {micro} x accumulation {accum})"


def global_batch_change(ckpt: Path, saved: dict | None, cfg, processes: int | None) -> dict[str, tuple]:
    """The global batch (micro-batch x accumulation x processes) the checkpoint was trained with against this
    launch's, where the number of processes changed: resuming a 2-GPU run on 1 GPU halves what each step
    averages over, as halving train.grad_accum would (which the guard compares), and no config key says so.
    Empty when the number of processes is the same (grad_accum / micro_batch_size are compared as keys) or
    when the global batch is kept (grad_accum scaled to the new number of processes)."""
    from .deepspeed_checkpoint import has_deepspeed

    then = saved_processes(ckpt) if processes else None
    train = (saved or {}).get("train") if isinstance(saved, dict) else None
    if not then or then == processes or not isinstance(train, dict):
        return {}
    if has_deepspeed(ckpt):  # its partitions load on the world size that wrote them only: refused as that
        return {}              # (deepspeed_checkpoint.load_deepspeed), which no accumulation could make up for
    micro, accum = train.get("micro_batch_size"), train.get("grad_accum")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (micro, accum)):
        return {}
    now_micro, now_accum = cfg.train.micro_batch_size, cfg.train.grad_accum
    if then * micro * accum == processes * now_micro * now_accum:
        return {}
    return {GLOBAL_BATCH: (_batch(then, micro, accum), _batch(processes, now_micro, now_accum))}


def _global_batch_fix(ckpt: Path, cfg, processes: int | None) -> str:
    """How to keep the checkpoint's global batch on this launch: its number of processes, or the accumulation
    that makes up for the new one."""
    then = saved_processes(ckpt)
    saved = (saved_config(ckpt) or {}).get("train") or {}
    total = then * saved["micro_batch_size"] * saved["grad_accum"]
    per_step = cfg.train.micro_batch_size * (processes or 1)
    keep = f"or train.grad_accum={total // per_step} to keep {total} per step (with train.accept_changes=true); " \
        if total % per_step == 0 else ""
    return f"launch on {then} process(es) as the checkpoint was written (torchrun --nproc_per_node {then}); {keep}"


def check(ckpt: Path, cfg, step: int, saved_data: dict | None = None, now_data: dict | None = None,
          processes: int | None = None) -> dict[str, tuple]:
    """The accepted differences (empty when none); raises ConfigError when there are unaccepted ones, or
    ones that cannot be applied (whatever train.accept_changes says)."""
    from ..errors import ConfigError

    if step > cfg.train.max_steps:
        raise ConfigError(f"the checkpoint {ckpt.name} is at step {step}, past train.max_steps={cfg.train.max_steps}",
                          where=str(ckpt),
                          fix=f"train.max_steps={step} or more (with train.accept_changes=true), or train.resume=false "
                              "to start over")
    diffs, fixed = compare(ckpt, cfg, saved_data, now_data, processes)
    if fixed:
        lines = "; ".join(f"{k}: {diffs[k][0]!r} -> {diffs[k][1]!r} ({why})" for k, why in fixed.items())
        raise ConfigError(
            f"resuming from {ckpt.name} with a change no resume can apply, not even with train.accept_changes=true: "
            f"{lines}", where=str(ckpt),
            fix="restore " + ", ".join(fixed) + " to resume; or train.resume=false / a new output_dir to start a "
                "run with the new values")
    if diffs and not cfg.train.accept_changes:
        lines = "; ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in ((k, *v) for k, v in diffs.items()))
        data = any(" " in k for k in diffs)  # the data fingerprint's keys are words; config keys are dotted names
        raise ConfigError(
            f"resuming from {ckpt.name} with a config{' or data' if data else ''} that changes the run: {lines}",
            where=str(ckpt),
            fix=(_global_batch_fix(ckpt, cfg, processes) if GLOBAL_BATCH in diffs else "")
                + ("" if set(diffs) == {GLOBAL_BATCH} else "restore those values" + (" (and the data as it was)" if
                                                                                      data else "") + " to resume exactly; ")
                + "or add "
                "train.accept_changes=true to continue with the new values on purpose (they are applied and "
                "recorded); or train.resume=false / a new output_dir to start over")
    return diffs


def apply(diffs: dict[str, tuple], position: dict) -> dict:
    """The data position for the new config: a changed micro-batch size keeps the records already seen."""
    if "train.micro_batch_size" in diffs:
        old, new = diffs["train.micro_batch_size"]
        position = dict(position, index=position["index"] * old // new)
    return position


def truncate_logs(out: Path, step: int) -> dict[str, int]:
    """Drop rows written after `step` (the work since the checkpoint, done again now) from metrics.jsonl
    and predictions.jsonl, and a half-written last line, so no row appears twice. Returns rows dropped."""
    import os

    dropped = {}
    for name in ("metrics.jsonl", "predictions.jsonl"):
        path = out / name
        if not path.exists():
            continue
        kept, n = [], 0
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                n += 1
                continue
            if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] > step:
                n += 1
                continue
            kept.append(line)
        if n:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
            os.replace(tmp, path)
            dropped[name] = n
    return dropped
