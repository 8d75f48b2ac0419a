"""What `mmtune train` prints at the start: the run and every decision with its reason."""

from __future__ import annotations

from rich.markup import escape

from ..console import console


def batch_scale(run) -> dict:
    """What one optimizer step and one epoch are, over all ranks: records per step (world size x micro
    batch x accumulation), the base LR, answer+prompt tokens per step (from the start-up scan's record
    lengths), and optimizer steps per epoch (each rank's share, cut to whole micro-batches as the
    BatchStream cuts it)."""
    t = run.cfg.train
    world = run.accelerator.num_processes
    per_step = world * t.micro_batch_size * t.grad_accum
    n = len(run.train_set.records)
    micro_per_epoch = (n // world) // t.micro_batch_size  # per rank, as data/batches.py cuts an epoch
    lengths = [x["total"] for x in run.train_lengths]
    # No lengths yet: the start-up check runs beside training (data/startup_scan.py); filled in when it is done.
    mean_tokens = sum(lengths) / len(lengths) if lengths else None
    return {"world_size": world, "micro_batch_size": t.micro_batch_size, "grad_accum": t.grad_accum,
            "effective_batch": per_step, "lr": t.lr,
            "tokens_per_step": round(per_step * mean_tokens) if lengths else None,
            "mean_record_tokens": round(mean_tokens, 1) if lengths else None, "train_records": n,
            "steps_per_epoch": round(micro_per_epoch / t.grad_accum, 2),
            "epochs": round(t.max_steps * t.grad_accum / max(micro_per_epoch, 1), 3)}


def epoch_time(scale: dict, step_time_s: float, steps_timed: int) -> dict:
    """The measured mean step time and the time an epoch (and the whole run) takes at that pace."""
    if not steps_timed:
        return {}
    return {"step_time_s": round(step_time_s, 6), "epoch_time_s": round(step_time_s * scale["steps_per_epoch"], 3),
            "steps_timed": steps_timed}


def scale_line(scale: dict) -> str:
    return (f"{scale['effective_batch']} records per step = {scale['world_size']} rank(s) x micro-batch "
            f"{scale['micro_batch_size']} x accumulation {scale['grad_accum']}; lr {scale['lr']:g}; "
            + (f"~{scale['tokens_per_step']:,} tokens per step (mean record {scale['mean_record_tokens']:g} tokens); "
               if scale["tokens_per_step"] is not None else "tokens per step once the start-up check is done; ")
            + f"{scale['steps_per_epoch']:g} steps per epoch of {scale['train_records']:,} records "
            f"({scale['epochs']:g} epochs in train.max_steps)")


def print_start_summary(run, notes) -> None:
    from rich.table import Table

    cfg = run.cfg
    t = Table(title=f"mmtune run -> {cfg.output_dir}", show_header=False, box=None)
    t.add_row("model", escape(f"{cfg.model.name} ({run.family.name}, {type(run.unwrapped_model()).__name__})"))
    t.add_row("method", f"{cfg.adapter.method}" + (f" r={cfg.adapter.r} alpha={cfg.adapter.lora_alpha}"
                                                   if cfg.adapter.method != "full" else ""))
    t.add_row("precision", f"{run.resolved.precision}{' + GradScaler' if run.resolved.loss_scaling else ''} "
              f"on {run.resolved.target.describe()}")
    t.add_row("data", f"train {len(run.train_set.records)} records"
              + (" (checked beside training: the report follows when done)" if getattr(run, "startup_check", None) else "")
              + (f", eval {len(run.eval_set.records)}" if run.eval_set is not None else ", no eval set")
              + (f", skipped {dict(run.train_set.skipped)}" if getattr(run.train_set, 'skipped', None) else "")
              + (f", eval skipped {dict(run.eval_set.skipped)}" if getattr(run.eval_set, 'skipped', None) else ""))
    for split, rs in (("train", run.train_set), ("eval", run.eval_set)):
        problems = list(getattr(rs, "problems", None) or [])
        if problems:  # the first few named: a count alone does not say where to look
            more = f" (and {rs.n_skipped - 3} more: mmtune data inspect CONFIG)" if rs.n_skipped > 3 else ""
            t.add_row(f"skipped {split}", escape("; ".join(f"{where}: {what}" for where, what in problems[:3]) + more))
    t.add_row("steps", f"{cfg.train.max_steps} x (micro-batch {cfg.train.micro_batch_size} x accumulation "
              f"{cfg.train.grad_accum} x {run.accelerator.num_processes} process(es))")
    t.add_row("batch", escape(scale_line(batch_scale(run))) + "; time per epoch printed once measured")
    t.add_row("optimizer", f"{cfg.train.optimizer} lr {cfg.train.lr} {cfg.train.scheduler}, warmup {cfg.train.warmup_steps}")
    # eval.generate=false scores no answer: the line does not promise metrics that are never computed
    scored = "".join(f" + {', '.join(cfg.eval.metrics)}" for _ in cfg.eval.metrics[:1] if cfg.eval.generate)
    t.add_row("eval", f"every {cfg.eval.every or 'end'}: eval_loss{scored}; best by {cfg.eval.best_metric}")
    for note in list(notes) + list(run.decisions):
        t.add_row("decision", escape(note))  # decisions quote pip extras like 'mmtune[gpu]'

    console.print(t)
    table = run.adapter_table
    if table is not None:
        console.print(table.render() if hasattr(table, "render") else table)
