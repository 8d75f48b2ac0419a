"""What `mmtune train` prints at the start: the run and every decision with its reason."""

from __future__ import annotations

from rich.markup import escape

from ..console import console


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
              + (f", eval {len(run.eval_set.records)}" if run.eval_set is not None else ", no eval set")
              + (f", skipped {dict(run.train_set.skipped)}" if getattr(run.train_set, 'skipped', None) else ""))
    t.add_row("steps", f"{cfg.train.max_steps} x (micro-batch {cfg.train.micro_batch_size} x accumulation "
              f"{cfg.train.grad_accum} x {run.accelerator.num_processes} process(es))")
    t.add_row("optimizer", f"{cfg.train.optimizer} lr {cfg.train.lr} {cfg.train.scheduler}, warmup {cfg.train.warmup_steps}")
    t.add_row("eval", f"every {cfg.eval.every or 'end'}: eval_loss + {', '.join(cfg.eval.metrics)}; "
              f"best by {cfg.eval.best_metric}")
    for note in list(notes) + list(run.decisions):
        t.add_row("decision", escape(note))  # decisions quote pip extras like 'mmtune[gpu]'

    console.print(t)
    table = run.adapter_table
    if table is not None:
        console.print(table.render() if hasattr(table, "render") else table)
