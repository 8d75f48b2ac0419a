"""How long the run is, in the user's words: `train.epochs` -> `train.max_steps`, and
`train.warmup_ratio` -> `train.warmup_steps`, decided once (resolve_run) with the arithmetic as the reason.

An epoch is what the loop's BatchStream serves per rank: floor(records / processes) records, cut into
whole micro-batches (the ragged tail is dropped, data/batches.py); `grad_accum` micro-batches make one
optimizer step, and the stream runs on across epoch boundaries, so steps = ceil(epochs x micro-batches
per epoch / grad_accum). The records are the ones loaded (a mixture: its drawn epoch, `data.mixture_size`
or its sources' counts), before the start-up media/length check; records that check skips (with
`data.on_bad_record=skip`) make each epoch slightly shorter than counted, and the start-up summary says
how many.
"""

from __future__ import annotations

import math
import os

from .decisions import Decision


def world_size(target) -> int:
    """Processes the run trains on: torchrun / accelerate's WORLD_SIZE here, one for a planned target."""
    return max(1, int(os.environ.get("WORLD_SIZE", "1"))) if target.local else 1


def count_train_records(cfg) -> int:
    """Records in one epoch of data.train, as the loop will count them."""
    from ..errors import ConfigError

    spec = cfg.data.train
    if not spec:
        raise ConfigError("train.epochs needs data.train to count its records", where="train.epochs",
                          fix="set data.train, or give train.max_steps instead")
    if isinstance(spec, str) and spec.startswith("synthetic:"):
        return cfg.data.synthetic_train_size
    from ..data.sources import load_records

    return len(load_records(spec, cfg.data, split="train").records)


def decide_length(cfg, target, n_records: int | None = None, what: str = "records") -> tuple[dict, list[Decision]]:
    """(updates for cfg.train, decisions). Empty when the config gives steps for both. `n_records`: an epoch's
    records counted by the caller (`what` they are), instead of loading data.train here."""
    t = cfg.train
    updates: dict = {}
    decisions: list[Decision] = []
    steps = t.max_steps
    if t.epochs is not None and cfg.data.streaming:
        from ..errors import ConfigError

        raise ConfigError(f"train.epochs={t.epochs:g} with data.streaming=true: a stream's size is not known before "
                          "it is read, so epochs cannot be turned into steps", where="train.epochs",
                          fix="give train.max_steps instead (a stream that runs out starts its next epoch)")
    if t.epochs is not None:
        n = count_train_records(cfg) if n_records is None else n_records
        world = world_size(target)
        per_epoch = (n // world) // t.micro_batch_size
        if per_epoch == 0:
            from ..errors import ConfigError

            raise ConfigError(f"train.epochs: {n} training records make no micro-batch of {t.micro_batch_size} on "
                              f"each of {world} process(es)", where="train.micro_batch_size",
                              fix=f"train.micro_batch_size={max(1, n // world)} or add data")
        steps = max(1, math.ceil(t.epochs * per_epoch / t.grad_accum))
        kind = "a mixture epoch of" if isinstance(cfg.data.train, list) else "an epoch of"
        decisions.append(Decision(
            "train.max_steps", str(steps),
            f"train.epochs={t.epochs:g}: {kind} {n} {what} / ({world} process(es) x micro-batch "
            f"{t.micro_batch_size}) = {per_epoch} micro-batches, / grad_accum {t.grad_accum} -> "
            f"{per_epoch / t.grad_accum:g} steps per epoch", changed=True))
        updates.update(max_steps=steps, epochs=None)
    if t.warmup_ratio is not None:
        warm = round(t.warmup_ratio * steps)
        decisions.append(Decision("train.warmup_steps", str(warm),
                                  f"train.warmup_ratio={t.warmup_ratio:g} x {steps} steps, rounded", changed=True))
        updates.update(warmup_steps=warm, warmup_ratio=None)
    return updates, decisions


def recount_over_windows(run, n: int):
    """data.format=text: `train.epochs` became steps from the documents loaded (resolve_run counts before the
    tokenizer exists), but an epoch is the `n` windows they were cut into (data/text_windows.py). Recount with
    them and put the new steps (and a warmup ratio's steps) in force: run.cfg, the resolved run's decisions
    (config.resolved.yaml) and the start-up summary. Returns the config in force."""
    import dataclasses

    req = run.resolved.requested
    if req.train.epochs is None:
        return run.cfg
    updates, decisions = decide_length(req, run.resolved.target, n_records=n, what="windows (raw-text documents cut "
                                       "to data.max_length)")
    if updates.get("max_steps") == run.cfg.train.max_steps:
        return run.cfg
    cfg = run.cfg.model_copy(update={"train": run.cfg.train.model_copy(update=updates)})
    keys = {d.key for d in decisions}
    run.resolved = dataclasses.replace(run.resolved, cfg=cfg, decisions=tuple(
        d for d in run.resolved.decisions if d.key not in keys) + tuple(decisions))
    run.decisions[:] = [line for line in run.decisions if line.split(":", 1)[0] not in keys] + [
        d.line() for d in decisions]
    run.cfg = cfg
    return cfg
