"""The training loop, top to bottom.

    build the run -> write the resolved config -> resume if a checkpoint exists ->
    for each optimizer step: take grad_accum micro-batches, forward/backward (token-normalised),
    clip, step, log -> every eval.every steps: eval loss + task metrics, checkpoint, keep best + last K
    -> final eval, final checkpoint, summary.json

Everything the step does lives in train/step.py (shared with the planner); what is set up before step 1
in train/prepare.py; the micro-batches in train/feed.py; what happens at eval / save points and at the end
in train/milestones.py (checkpoints in train/checkpoint.py, evaluation in evaluate/run_eval.py).
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from pathlib import Path

from ..console import console
from ..errors import MMTuneError
from ..media_balance import balance_for
from .feed import close, flat_indices, merge_check, next_micro_batch, open_feed, settle
from .milestones import (
    agree,
    baseline,
    checkpoint_now,
    evaluate_now,
    peak_memory_bytes,
    track_best,
    write_summary,
)
from .prepare import aux_terms, prepare_output, seed_python_and_numpy


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
    seed_python_and_numpy(cfg.train.seed)  # torch is seeded by build_run; resume restores all three

    st = prepare_output(run)
    if st.finished is not None:
        return st.finished
    step, position, best, eval_metrics, history, ckpt = (st.step, st.position, st.best, st.eval_metrics, st.history,
                                                         st.checkpoint)
    from .logging_sinks import Sinks

    sinks = Sinks(cfg, out, enabled=main, purge_step=step + 1 if ckpt is not None else None)
    if main and history and history[-1]["step"] == step:  # changes accepted now (history comes from ckpt)
        sinks.log(step, {"accepted_changes": history[-1]["changes"], "from": ckpt.name}, kind="resume")
    aux = aux_terms(run)
    aux_losses = [t.loss for t in aux]
    cursor, loader = open_feed(run, position, aux_losses)
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
    check = getattr(run, "startup_check", None) if main else None  # data.startup_scan=background: merge_check
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
            "peak_memory_bytes": peak_memory_bytes(),
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
                  eval_every=cfg.eval.every if run.eval_set is not None else None) as bar, _closing(loader):
        while step < cfg.train.max_steps:
            if check is not None and not check_report and check.done():
                check_report.update(merge_check(run, check, late_bad, sinks, step, scale))
            t0, c0 = time.perf_counter(), time.process_time()
            ids, micro = [], []
            for _ in range(cfg.train.grad_accum):
                b, mb = cursor.next_micro_batch() if loader is None else next_micro_batch(run, cursor, loader, late_bad)
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
                                     loss_impl=cfg.train.loss_impl, objective=run.objective)
            step += 1
            if cfg.train.nan_guard and not math.isfinite(res.loss):
                bad = [i if isinstance(i, str) else run.train_set.records[i].id for b in ids for i in flat_indices(b)]
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
            at_save, stopping = agree(acc, bool(at_save) or bool(minutes) and time.monotonic() - last_save >= minutes * 60,
                                       stop.requested)
            last = step == cfg.train.max_steps
            if at_eval or at_save or last or stopping or stop_after is not None and step >= stop_after:
                settle(loader)  # the prefetch thread is idle: evaluation and checkpoints use the processor
            if (at_eval or last) and run.eval_set is not None:
                eval_metrics = evaluate_now(run, step, sinks, bar)
                track_best(cfg, best, eval_metrics, step)
            if at_eval or at_save or last or stopping:
                checkpoint_now(run, step, {"step": step, "position": cursor.position(), "best": best,
                                        "accepted_changes": history, "data": st.data}, eval_metrics)
                last_save = time.monotonic()
            if stopping and not last:
                sinks.close()
                if main and step > start_step:
                    write_summary(out, summary_so_far(interrupted=stop.signal_name or "signal"))
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
            check_report.update(merge_check(run, check, late_bad, sinks, step, scale))
        else:
            check.cancel()
    summary = summary_so_far()
    if run.eval_set is not None and main:
        summary["baseline"] = baseline(run)
    if main:
        write_summary(out, summary)
    sinks.close()
    return summary


class _closing:
    """Stops the feed's prefetch thread when the loop ends, however it ends."""

    def __init__(self, loader):
        self.loader = loader

    def __enter__(self):
        return self.loader

    def __exit__(self, *exc):
        close(self.loader)
        return False


__all__ = ["train"]
