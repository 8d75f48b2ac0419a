"""What the loop does at its milestones (eval.every, train.save_every, a signal, the last step) and at the
end: evaluation logged with its predictions, the best checkpoint tracked, checkpoints saved and pruned,
decisions every rank takes alike, and summary.json with the best-constant baseline."""

from __future__ import annotations

import json
from pathlib import Path

from .checkpoint import prune_checkpoints, save_checkpoint


def agree(acc, *flags: bool) -> tuple[bool, ...]:
    """Each flag true on every rank when it is true on any (one all-reduce for all): a decision taken
    from a clock or a signal must be the same on all ranks, or one would wait forever in a barrier."""
    if acc.num_processes == 1:
        return tuple(bool(f) for f in flags)
    import torch

    t = torch.tensor([1.0 if f else 0.0 for f in flags], device=acc.device)
    return tuple(bool(v > 0) for v in acc.reduce(t, reduction="sum").tolist())


def evaluate_now(run, step, sinks, bar, stop=None):
    """The eval set's metrics at `step`, or None when `stop` (the run's StopRequest) was set during the evaluation:
    it is then given up between two batches, every rank at the same batch, so the stop's checkpoint is written
    within a preemption's grace period whatever the eval set's size."""
    from ..evaluate.run_eval import EvalInterrupted, evaluate

    acc = run.accelerator
    interrupt = None if stop is None else (lambda: agree(acc, stop.requested)[0])
    # Capped by data.eval_max_samples when loaded. Every rank evaluates its shard; all get the whole set's metrics.
    try:
        metrics, preds = evaluate(run, run.eval_set.records, interrupt=interrupt)
    except EvalInterrupted:
        bar.note(f"evaluation of step {step} given up for the stop: it is not in metrics.jsonl")
        return None
    if acc.is_main_process:
        sinks.log(step, metrics, kind="eval")
        with open(Path(run.cfg.output_dir) / "predictions.jsonl", "a") as f:
            f.writelines(json.dumps({"step": step, **p}) + "\n" for p in preds)
        bar.note("eval " + " ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
    acc.wait_for_everyone()
    return metrics


def track_best(cfg, best, metrics, step, higher: bool) -> None:
    """`higher`: the resolved run's eval.greater_is_better (decided once at start, evaluate/best_metric.py)."""
    name = cfg.eval.best_metric
    if name not in metrics:  # an evaluation given up part way; the start refuses a name never computed
        return
    v = metrics[name]
    if best["value"] is None or (v > best["value"] if higher else v < best["value"]):
        # Relative to the run folder, so a moved folder still knows (and keeps) its best checkpoint.
        best.update(value=v, step=step, path=f"checkpoint-{step}", metric=name)


def checkpoint_now(run, step, train_state: dict, metrics) -> None:
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


def peak_memory_bytes() -> int:
    import resource

    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def write_summary(out: Path, summary: dict) -> None:
    import os

    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, default=str))
    os.replace(tmp, out / "summary.json")  # never a half-written summary


def baseline(run) -> dict:
    from ..evaluate.metrics import best_constant_baseline
    from ..evaluate.run_eval import references

    kept = getattr(run, "train_ok", None) or run.train_set.records  # the check's good records, when it ran beside
    train_answers = [run.encoder.answer_text(r) for r in kept]
    try:
        return best_constant_baseline(list(run.cfg.eval.metrics), train_answers,
                                      [references(run.encoder, r) for r in run.eval_set.records])
    except ValueError as e:  # e.g. mae on non-numeric answers: say so instead of a number
        return {"error": str(e)}
