"""The training loop, top to bottom.

    build the run -> write the resolved config -> resume if a checkpoint exists ->
    for each optimizer step: take grad_accum micro-batches, forward/backward (token-normalised),
    clip, step, log -> every eval.every steps: eval loss + task metrics, checkpoint, keep best + last K
    -> final eval, final checkpoint, summary.json

Everything the step does lives in train/step.py (shared with the planner); checkpoints in
train/checkpoint.py; evaluation in evaluate/run_eval.py.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from contextlib import nullcontext
from pathlib import Path

from ..console import console
from ..data.batches import BatchStream
from ..errors import MMTuneError
from ..media_balance import balance_for
from .checkpoint import (
    clean_leftovers,
    list_checkpoints,
    load_checkpoint,
    newest_valid_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)


class EncodedDataset:
    """Records encoded when first drawn and kept in the run's cache while data.cache_mb lasts
    (data/encode_cache.py), served from it after that; past the budget, encoded on each draw (in
    DataLoader workers when train.num_workers > 0, each filling its own copy of the cache). Records were
    only measured at start-up, so a media file that fails to decode now is a bad record found late: it comes back as
    `{BAD: (index, source, reason, what)}` for the loop to handle by data.on_bad_record, never a crash
    inside a worker."""

    def __init__(self, records, encoder, cache=None, aux_losses=()):
        self.records, self.encoder, self.cache, self.aux_losses = records, encoder, cache, tuple(aux_losses)

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        from ..data.encode_cache import key
        from ..data.formats import BadRecord

        r = self.records[i]
        hit = self.cache.get(key(r)) if self.cache is not None else None
        if hit is not None:
            encoded = dict(hit)  # the cache's own entry stays as it is
        else:
            try:
                encoded = self.encoder.encode(r)
            except BadRecord as e:
                return {BAD: (i, r.source, e.reason, e.what, e.fix)}
            if self.cache is not None and not self.cache.full:
                self.cache.put(key(r), encoded)  # packed copies: `encoded` itself goes on unchanged
        for loss in self.aux_losses:  # each auxiliary loss's per-record targets (aux_* keys)
            encoded.update(loss.record_inputs(r, encoded))
        return encoded


BAD = "_bad_record"


class SkippingCollator:
    """The run's collator over the good records of a micro-batch; bad ones are listed under BAD."""

    def __init__(self, collator):
        self.collator = collator

    def __call__(self, items):
        # A packed row (data.packing) lists its bad records under BAD next to its good ones.
        good = [{k: v for k, v in it.items() if k != BAD} for it in items if set(it) - {BAD}]
        batch = self.collator(good) if good else {}
        batch[BAD] = [b for it in items if BAD in it for b in (it[BAD] if isinstance(it[BAD], list) else [it[BAD]])]
        return batch


class _FromStream:
    """A batch sampler that reads a *copy* of the stream, so the loader may prefetch ahead."""

    def __init__(self, stream_args: dict):
        self.args = stream_args

    def __iter__(self):
        s = BatchStream(**self.args)
        while True:
            yield s.next()


def _micro_batch_loader(run, stream_args: dict, aux_losses=()):
    from ..data.collate import make_dataloader

    dataset = EncodedDataset(run.train_set.records, run.encoder, run.encode_cache, aux_losses)
    if run.cfg.data.packing:  # the sampler yields rows of records; the loader packs them (data/packing.py)
        from ..compat.rope_index import rope_index_of
        from ..data.packing import PackedRows

        dataset = PackedRows(dataset, rope_index_of(run.unwrapped_model()), bad_key=BAD)
    return iter(make_dataloader(dataset, SkippingCollator(run.collator), _FromStream(stream_args),
                                plan=run.resolved.loader, seed=run.cfg.train.seed))


def _next_micro_batch(run, cursor, loader, late_bad: set) -> tuple[list[int], dict]:
    """The next micro-batch with at least one good record. A record found bad only now (its media
    failed to decode after the start-up header check) follows data.on_bad_record: "error" stops with
    the record named; "skip" counts it once (summary.json `skipped_records`) and trains on the rest."""
    from ..errors import DataError

    while True:
        ids, mb = cursor.next(), next(loader)
        for i, source, reason, what, fix in mb.pop(BAD):
            if run.cfg.data.on_bad_record == "error":
                how = ("the start-up check runs beside training" if getattr(run, "startup_check", None) else
                       "the start-up check reads media headers only")
                raise DataError(f"{what} (found while training: {how})",
                                where=source, fix=(f"{fix}; or " if fix else "") + "data.on_bad_record=skip to count "
                                "and skip such records; the run resumes from its last checkpoint")
            if i not in late_bad:
                late_bad.add(i)
                run.train_set.skip(source, reason, what)
        if len(late_bad) == len(run.train_set.records):  # else this would wait forever for a good one
            raise DataError("every training record failed to encode while training", where=str(run.cfg.data.train),
                            fix="see skipped_records in summary.json or `mmtune data inspect CONFIG`")
        if mb:
            return ids, mb


def train(run, *, plan: dict | None = None, stop_after: int | None = None) -> dict | None:
    """Run the loop; returns the summary. `stop_after=N` ends the process's work right after step N
    (and its checkpoint, if one is due) without a summary, the way a kill would: tests use it."""
    from .lock import output_dir_lock
    from .signals import StopRequest

    # One process per output_dir (the main rank holds the lock); SIGTERM/SIGINT end the run cleanly.
    with output_dir_lock(run.cfg.output_dir, enabled=run.accelerator.is_main_process), StopRequest() as stop:
        try:
            return _train(run, plan, stop_after, stop)
        except BaseException as e:
            if getattr(run, "startup_check", None) is not None:  # the run stops here: so does its check (and its processes)
                run.startup_check.cancel()
            if not isinstance(e, OSError):
                raise
            import errno

            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # A full disk while logging (metrics, predictions, summary): say so, not a traceback.
            raise MMTuneError(f"the disk is full ({e.strerror})", where=str(getattr(e, "filename", None)
                                                                           or run.cfg.output_dir),
                              fix="free space on that disk, then run the same command again: training resumes "
                                  "from the last checkpoint") from None


def _train(run, plan, stop_after, stop) -> dict | None:
    import torch

    cfg, acc = run.cfg, run.accelerator
    out = Path(cfg.output_dir)
    main = acc.is_main_process
    _seed_python_and_numpy(cfg.train.seed)  # torch is seeded by build_run; resume restores all three

    # ---- resume -------------------------------------------------------------------------------
    step, position, best = 0, {"epoch": 0, "index": 0}, {"value": None, "step": None, "path": None}
    eval_metrics: dict = {}
    history: list[dict] = []  # config changes accepted on resume, carried from checkpoint to checkpoint
    if main:
        out.mkdir(parents=True, exist_ok=True)
        for name in clean_leftovers(out):
            console.print(f"removed {name}: the leftover of a checkpoint save that did not finish")
    ckpt = _resume_source(out) if cfg.train.resume else None
    if ckpt is not None:
        from . import resume_guard

        meta = json.loads((ckpt / "meta.json").read_text())
        changes = resume_guard.check(ckpt, cfg, meta["step"])
        state = load_checkpoint(run, ckpt)
        step, position, best = state["step"], state["position"], state["best"]
        eval_metrics = meta.get("metrics", {})
        history = list(state.get("accepted_changes", []))
        if changes:
            position = resume_guard.apply(changes, position)
            history.append({"step": step, "changes": {k: list(v) for k, v in changes.items()}})
            console.print("[yellow]resuming with changed settings (train.accept_changes=true):[/] "
                          + "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changes.items()))
        if main:
            dropped = resume_guard.truncate_logs(out, step)
            if dropped:
                console.print(f"logs cut back to step {step} (the work after it is done again): "
                              + ", ".join(f"{n} row(s) of {name}" for name, n in dropped.items()))
        console.print(f"[bold]resumed[/] from {ckpt} at step {step}")
    if main:
        from ..config import dump_config

        # Failure mode 23: the config in force (written after the resume guard accepted it), every
        # automatic decision applied, each with its reason.
        header = "".join(f"# {line}\n" for line in run.resolved.summary_lines())
        (out / "config.resolved.yaml").write_text("# decisions (mmtune.resolve):\n" + header + dump_config(cfg))
        from ..launch_config import write_launch_files

        for path in write_launch_files(run.resolved, out):  # zero2 / zero3: the DeepSpeed + accelerate files used
            from rich.markup import escape  # the file's own brackets are text, not markup

            console.print(f"[dim]{escape(path.name)} (generated from the run):[/]\n{escape(path.read_text())}",
                          soft_wrap=True)
    # A resumed run appends to its logs; a fresh start in a reused output_dir starts them anew, so
    # metrics.jsonl never mixes two runs.
    if main and ckpt is None:
        for name in ("metrics.jsonl", "predictions.jsonl", "summary.json"):
            (out / name).unlink(missing_ok=True)
        stale = list_checkpoints(out)
        if stale:  # train.resume=false: this folder's earlier checkpoints would be mistaken for this run's
            for p in stale:
                shutil.rmtree(p)
            (out / "best").unlink(missing_ok=True)
            console.print(f"train.resume=false: removed {len(stale)} checkpoint(s) of an earlier run in {out}")
    if ckpt is not None and step >= cfg.train.max_steps:
        done = _finished_summary(out, step)
        if done is not None:  # nothing to do: never overwrite the results of a finished run
            console.print(f"this run already finished at step {step}; {out / 'summary.json'} kept. To train "
                          "longer raise train.max_steps (with train.accept_changes=true); to start over, "
                          "train.resume=false")
            return done
    from .logging_sinks import Sinks

    sinks = Sinks(cfg, out, enabled=main, purge_step=step + 1 if ckpt is not None else None)
    if main and history and history[-1]["step"] == step:  # changes accepted now (history comes from ckpt)
        sinks.log(step, {"accepted_changes": history[-1]["changes"], "from": ckpt.name}, kind="resume")
    aux = aux_terms(run)
    aux_losses = [t.loss for t in aux]
    if cfg.data.streaming:  # records read as drawn, never all in memory (data/streaming.py): its own cursor
        from ..data.streaming import StreamingBatches

        cursor, loader = StreamingBatches(run, position, aux_losses), None
    else:
        lengths = [x["total"] for x in run.train_lengths] if cfg.data.group_by_length or cfg.data.packing else None
        stream_args = dict(n=len(run.train_set.records), seed=cfg.train.seed, micro_batch_size=cfg.train.micro_batch_size,
                           rank=acc.process_index, world_size=acc.num_processes, lengths=lengths,
                           pack=cfg.data.max_length if cfg.data.packing else None,
                           epoch=position["epoch"], index=position["index"])  # a stream's position has more
        cursor = BatchStream(**stream_args)  # advances only as micro-batches are consumed: the resume position
        loader = _micro_batch_loader(run, stream_args, aux_losses)
    staged = None
    if cfg.train.stages:
        from ..sharding import is_sharded
        from ..stages import StagedParams, stage_index

        staged = StagedParams(run.unwrapped_model(), run.family, cfg.train.stages)
    # Only this stage's parameters learn: by requires_grad, or under FSDP (fixed flags) by dropped gradients.
    drop_stage_grads = staged is not None and is_sharded(run.model)
    balance = balance_for(run, run.train_set.records)  # fsdp / zero3: every rank runs the same towers

    def world_sum(x):
        if acc.num_processes == 1:
            return x
        t = torch.tensor(float(x), device=acc.device, dtype=torch.float64)
        return type(x)(acc.reduce(t, reduction="sum").item())

    # ---- the loop -----------------------------------------------------------------------------
    from .progress import Progress
    from .step import optimizer_step

    run.model.train()
    t_start = time.perf_counter()
    tokens_seen, train_time = 0, 0.0
    data_wait, padded_tokens, late_bad = 0.0, 0, set()  # late_bad: indices counted as skipped by this process
    check = getattr(run, "startup_check", None) if main else None  # data.startup_scan=background: merged once done (_merge_check)
    check_report: dict = {}
    last_save = time.monotonic()
    start_step = step
    res = None  # the last step's StepResult
    from .summary import batch_scale, epoch_time

    scale = batch_scale(run)  # effective batch, lr, tokens per step, steps per epoch (summary.py)
    timed = {"s": 0.0, "n": 0}  # step times after the first (warm-up) step of this process
    first = {"wait": 0.0, "time": 0.0}  # this process's first step: its data wait and its step time
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()

    def summary_so_far(**extra) -> dict:
        return {
            "output_dir": str(out),
            "steps": step,
            "eval": eval_metrics,
            "best": best,
            "peak_memory_bytes": _peak_memory_bytes(),
            "peak_memory_kind": "cuda_max_memory_allocated" if torch.cuda.is_available() else "cpu_max_rss",
            "peak_memory_reserved_bytes": int(torch.cuda.max_memory_reserved()) if torch.cuda.is_available() else None,
            "predicted_peak_bytes": (plan or {}).get("predicted_peak_bytes"),
            "predicted_peak_reserved_bytes": (plan or {}).get("predicted_peak_reserved_bytes"),
            "tokens_per_s": tokens_seen * acc.num_processes / train_time if train_time else 0.0,
            # Time the loop waited for micro-batches (encoding, collating, workers), of the step time; the
            # process's first step (workers starting, the first micro-batches) apart from the steady state.
            "data_wait_fraction": data_wait / train_time if train_time else 0.0,
            "data_wait_first_step_s": first["wait"],
            "data_wait_fraction_after_first_step": ((data_wait - first["wait"]) / (train_time - first["time"])
                                                    if train_time > first["time"] else 0.0),
            "padding_fraction": 1 - tokens_seen / padded_tokens if padded_tokens else 0.0,
            "wall_s": time.perf_counter() - t_start,
            "train_records": getattr(cursor, "records_read", len(run.train_set.records)),  # a stream: read so far
            "startup": getattr(run, "startup", None),
            "skipped_records": dict(getattr(run.train_set, "skipped", {}) or {}),
            "skipped_eval_records": dict(getattr(run.eval_set, "skipped", {}) or {}),
            "decisions": run.decisions,
            "accepted_changes": history,
            # With auxiliary losses: the loss and its parts at the last step.
            **({"train_losses": {"loss": res.loss, **res.parts}} if res is not None and res.parts else {}),
            "scale": {**scale, **epoch_time(scale, timed["s"] / max(timed["n"], 1), timed["n"])},
            **({"tower_rows_added": balance.dummy_rows} if balance is not None else {}),
            **({"startup_check": check_report or {"when": "beside training", "finished": False}}
               if check is not None else {}),
            **extra,
        }

    with Progress(total=cfg.train.max_steps, start=step, enabled=main,
                  eval_every=cfg.eval.every if run.eval_set is not None else None) as bar:
        while step < cfg.train.max_steps:
            if check is not None and not check_report and check.done():
                check_report.update(_merge_check(run, check, late_bad, sinks, step, scale))
            t0, c0 = time.perf_counter(), time.process_time()
            ids, micro = [], []
            for _ in range(cfg.train.grad_accum):
                b, mb = cursor.next_micro_batch() if loader is None else _next_micro_batch(run, cursor, loader, late_bad)
                ids.append(b)
                micro.append(mb)
            wait = time.perf_counter() - t0
            if balance is not None:
                micro = balance.balance(micro, run.collator)
            padded = sum(int(mb["input_ids"].numel()) for mb in micro)
            with staged.active(step) if staged and not drop_stage_grads else nullcontext():
                res = optimizer_step(run.model, run.optimizer, run.scheduler, micro, accelerator=acc,
                                     max_grad_norm=cfg.train.max_grad_norm, trainable_params=run.trainable_params,
                                     world_tokens=world_sum, aux=aux, step=step,
                                     inactive=staged.inactive(step) if drop_stage_grads else (),
                                     loss_impl=cfg.train.loss_impl)
            step += 1
            if cfg.train.nan_guard and not math.isfinite(res.loss):
                bad = [i if isinstance(i, str) else run.train_set.records[i].id for b in ids for i in _flat(b)]
                raise MMTuneError(
                    f"loss became {res.loss} at step {step}",
                    where=f"records {bad[:8]}",
                    fix=("fp16 overflows easily; use train.precision=bf16 on a GPU that has it, or lower train.lr"
                         if run.resolved.precision == "fp16" else "lower train.lr or check these records"))
            dt = time.perf_counter() - t0
            train_time += dt
            if step > start_step + 1:  # the first step of a process warms up (allocations, kernels): not timed
                timed["s"], timed["n"] = timed["s"] + dt, timed["n"] + 1
                if timed["n"] == 3:
                    est = epoch_time(scale, timed["s"] / timed["n"], timed["n"])
                    bar.note(f"time per epoch ~{est['epoch_time_s'] / 60:.1f} min ({scale['steps_per_epoch']:g} steps x "
                             f"{est['step_time_s']:.3g} s, measured over 3 steps)")
            if step == start_step + 1:
                first["wait"], first["time"] = wait, dt
            tokens_seen += res.input_tokens
            data_wait += wait
            padded_tokens += padded
            lr = run.optimizer.param_groups[0]["lr"]
            row = {"loss": res.loss, **res.parts, "lr": lr,
                   **({"stage": stage_index(cfg.train.stages, step - 1)} if staged else {}),
                   "grad_norm": res.grad_norm, "answer_tokens": res.answer_tokens,
                   "tokens_per_s": res.input_tokens * acc.num_processes / dt, "step_time_s": dt,
                   # this process's CPU seconds for the step (workers' not included): on a shared machine
                   # the work done, where wall time also counts the waits for a core
                   "cpu_s": time.process_time() - c0,
                   "data_wait_s": wait, "padding_fraction": 1 - res.input_tokens / padded if padded else 0.0,
                   "epoch": cursor.epoch, "skipped_update": res.skipped}
            if step % cfg.train.log_every == 0 or step == cfg.train.max_steps:
                sinks.log(step, row)
            bar.update(step, loss=res.loss, lr=lr, tokens_per_s=row["tokens_per_s"])

            at_eval = cfg.eval.every and step % cfg.eval.every == 0
            at_save = cfg.train.save_every and step % cfg.train.save_every == 0
            minutes = cfg.train.save_every_minutes
            at_save, stopping = _agree(acc, bool(at_save) or bool(minutes) and time.monotonic() - last_save >= minutes * 60,
                                       stop.requested)
            last = step == cfg.train.max_steps
            if (at_eval or last) and run.eval_set is not None:
                eval_metrics = _evaluate(run, step, sinks, bar)
                _track_best(cfg, best, eval_metrics, step)
            if at_eval or at_save or last or stopping:
                _checkpoint(run, step, {"step": step, "position": cursor.position(), "best": best,
                                        "accepted_changes": history}, eval_metrics)
                last_save = time.monotonic()
            if stopping and not last:
                sinks.close()
                if main and step > start_step:
                    _write_summary(out, summary_so_far(interrupted=stop.signal_name or "signal"))
                raise MMTuneError(
                    f"stopped by {stop.signal_name or 'a signal on another rank'} at step {step} of "
                    f"{cfg.train.max_steps}; checkpoint-{step} and the summary so far are saved",
                    where=str(out),
                    fix="run the same command again (same output_dir) to resume from this step")
            if stop_after is not None and step >= stop_after and not last:
                sinks.close()
                if check is not None:  # as a kill would end it
                    check.cancel()
                return None

    if check is not None and not check_report:  # the full report belongs in the summary: wait for it now
        if not check.done():
            check.waited_at_step = step
            console.print(f"training done at step {step}; waiting for the start-up check of the training records")
        while not check.done() and not stop.requested:  # a signal ends the wait (the summary then says so)
            check.wait_for(1.0)
        if check.done():
            check_report.update(_merge_check(run, check, late_bad, sinks, step, scale))
        else:
            check.cancel()
    summary = summary_so_far()
    if run.eval_set is not None and main:
        summary["baseline"] = _baseline(run)
    if main:
        _write_summary(out, summary)
    sinks.close()
    return summary


# ---- helpers, in the order the loop uses them ----------------------------------------------------

def _merge_check(run, check, late_bad: set, sinks, step: int, scale: dict) -> dict:
    """The start-up check that ran beside training is done: its first bad record stops the run under
    data.on_bad_record=error; else its bad records are counted (each once: a record the loop already found
    bad when it drew it is not counted again, and is not counted again if drawn later), its lengths become
    the run's, and the report is logged (console and metrics.jsonl) and kept for summary.json."""
    from ..data.inspect import Scan
    from ..data.records import RecordSet
    from ..errors import DataError

    try:
        report = check.wait()
    except Exception as e:  # the check itself broke (a worker killed, out of memory): say so, with the way round
        raise MMTuneError(f"the start-up check of the training records, running beside training, failed: "
                          f"{type(e).__name__}: {e}", where=str(run.cfg.data.train),
                          fix="data.startup_scan=before runs it in this process before step 1; the run resumes "
                              "from its last checkpoint") from None
    if report.error is not None:
        e = report.error
        raise DataError(f"{e.what} (found by the start-up check running beside training, after step {step})",
                        where=e.where, fix=(e.fix + "; " if e.fix else "") + "the run resumes from its last checkpoint")
    found = {}
    for i, (source, reason, what, _fix) in sorted(report.bad.items()):
        found[reason] = found.get(reason, 0) + 1
        if i not in late_bad:
            late_bad.add(i)
            run.train_set.skip(source, reason, what)
    if not report.lengths:
        raise DataError(f"no usable training record ({dict(run.train_set.skipped)} skipped)",
                        where=str(run.cfg.data.train), fix="see `mmtune data inspect CONFIG` for the reasons")
    run.train_lengths = report.kept_lengths()
    run.train_ok = [run.train_set.records[i] for i in sorted(report.lengths)]
    run.startup.update(train_records_measured=len(report.lengths), train_check_s=report.seconds)
    from .summary import batch_scale

    scale.update(batch_scale(run))  # tokens per step, from the lengths now known
    out = {"when": "beside training", "finished": True, "records": report.records, "ok": len(report.lengths),
           "skipped": found, "seconds": report.seconds, "processes": report.processes, "merged_at_step": step,
           "waited_at_step": check.waited_at_step,
           "tokens": Scan(RecordSet(), lengths=run.train_lengths).distribution()}
    sinks.log(step, out, kind="startup_check")
    console.print(f"start-up check done (beside training, {report.seconds:g} s): {out['ok']:,} of {report.records:,} "
                  f"records ok" + (f", skipped {found}" if found else "") + f"; tokens max {out['tokens']['total']['max']}, "
                  f"p95 {out['tokens']['total']['p95']}, mean {out['tokens']['total']['mean']}")
    return out


def _flat(batch: list) -> list[int]:
    """A micro-batch's record indices (a packed micro-batch is a list of rows of indices)."""
    return [i for x in batch for i in (x if isinstance(x, list) else [x])]


def aux_terms(run) -> list:
    """train.aux_losses as AuxTerms, reading the model's image token id and the processor's merge."""
    if not run.cfg.train.aux_losses:
        return []
    from ..aux_losses import AuxContext, build_terms

    return build_terms(run.cfg.train.aux_losses, AuxContext.of(run.unwrapped_model().config, run.processor))


def _seed_python_and_numpy(seed: int) -> None:
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)


def _finished_summary(out: Path, step: int) -> dict | None:
    """A finished run's summary.json, when it is complete for this step (not an interrupted one's)."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if summary.get("steps") == step and not summary.get("interrupted") else None


def _write_summary(out: Path, summary: dict) -> None:
    import os

    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, default=str))
    os.replace(tmp, out / "summary.json")  # never a half-written summary


def _resume_source(out: Path):
    """The newest checkpoint that verifies; newer ones that do not are named with what is wrong."""
    ckpt, passed = newest_valid_checkpoint(out)
    for line in passed:
        console.print(f"[yellow]checkpoint passed over[/] {line}")
    if passed and ckpt is not None:
        console.print(f"resuming from {ckpt.name}, the newest checkpoint that verifies")
    if passed and ckpt is None:
        raise MMTuneError(f"no checkpoint in {out} verifies ({'; '.join(passed)})", where=str(out),
                          fix="train.resume=false to start over (this clears the folder's checkpoints and logs), "
                              "or a new output_dir")
    return ckpt


def _agree(acc, *flags: bool) -> tuple[bool, ...]:
    """Each flag true on every rank when it is true on any (one all-reduce for all): a decision taken
    from a clock or a signal must be the same on all ranks, or one would wait forever in a barrier."""
    if acc.num_processes == 1:
        return tuple(bool(f) for f in flags)
    import torch

    t = torch.tensor([1.0 if f else 0.0 for f in flags], device=acc.device)
    return tuple(bool(v > 0) for v in acc.reduce(t, reduction="sum").tolist())


def _evaluate(run, step, sinks, bar):
    from ..evaluate.run_eval import evaluate

    acc = run.accelerator
    # Capped by data.eval_max_samples when loaded. Every rank evaluates its shard; all get the whole set's metrics.
    metrics, preds = evaluate(run, run.eval_set.records)
    if acc.is_main_process:
        sinks.log(step, metrics, kind="eval")
        with open(Path(run.cfg.output_dir) / "predictions.jsonl", "a") as f:
            f.writelines(json.dumps({"step": step, **p}) + "\n" for p in preds)
        bar.note("eval " + " ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
    acc.wait_for_everyone()
    return metrics


def _track_best(cfg, best, metrics, step) -> None:
    from ..evaluate.metrics import greater_is_better

    name = cfg.eval.best_metric
    if name not in metrics:
        return
    higher = cfg.eval.greater_is_better if cfg.eval.greater_is_better is not None else greater_is_better(name)
    v = metrics[name]
    if best["value"] is None or (v > best["value"] if higher else v < best["value"]):
        # Relative to the run folder, so a moved folder still knows (and keeps) its best checkpoint.
        best.update(value=v, step=step, path=f"checkpoint-{step}", metric=name)


def _checkpoint(run, step, train_state: dict, metrics) -> None:
    acc = run.accelerator
    best = train_state["best"]
    save_checkpoint(run, step, train_state, metrics)  # every rank: its RNG, and its shards under fsdp
    if acc.is_main_process:
        out = Path(run.cfg.output_dir)
        # .name: runs saved before paths were relative stored absolute ones, which break when moved.
        best_dir = out / Path(best["path"]).name if best.get("path") else None
        prune_checkpoints(out, run.cfg.train.keep_last, keep={best_dir} if best_dir else set())
        if best_dir is not None and best_dir.is_dir():
            (out / "best").unlink(missing_ok=True)
            (out / "best").symlink_to(best_dir.name)  # relative: survives moving the run folder
    acc.wait_for_everyone()


def _peak_memory_bytes() -> int:
    import resource

    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def _baseline(run) -> dict:
    from ..evaluate.metrics import best_constant_baseline
    from ..evaluate.run_eval import references

    kept = getattr(run, "train_ok", None) or run.train_set.records  # the check's good records, when it ran beside
    train_answers = [run.encoder.answer_text(r) for r in kept]
    try:
        return best_constant_baseline(list(run.cfg.eval.metrics), train_answers,
                                      [references(run.encoder, r) for r in run.eval_set.records])
    except ValueError as e:  # e.g. mae on non-numeric answers: say so instead of a number
        return {"error": str(e)}


__all__ = ["list_checkpoints", "train"]
