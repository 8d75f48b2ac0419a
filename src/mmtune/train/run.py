"""What `mmtune train` and `mmtune eval` do around the loop: load config, preflight, build, report."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from ..console import console
from ..errors import MMTuneError


def prepare_config(config_path, overrides: list[str], *, smoke: bool = False):
    from ..config import load_config
    from ..smoke import smoke_config

    cfg = load_config(config_path, overrides)
    notes: list[str] = []
    if smoke:
        cfg, notes = smoke_config(cfg)
    return cfg, notes


def preflight(cfg, config_path, overrides, *, skip_checks: bool, smoke: bool = False) -> dict | None:
    """Doctor's fast checks (stop on errors) and the memory plan (refuse a run that will not fit).

    Returns the predicted peak allocated / reserved bytes when a GPU plan was made (compared in
    summary.json with the measured `peak_memory_bytes` / `peak_memory_reserved_bytes`).
    """
    if not skip_checks:
        from ..doctor.runner import run_doctor

        # The fast subset: config, hardware and loading rules, no model build and no data pass. A smoke
        # run checks what it will run: the tiny twin, on the CPU, in fp32.
        checked = list(overrides) + ([f"model.name={cfg.model.name}", f"train.precision={cfg.train.precision}",
                                      "train.device=cpu", "train.gpu=null"] if smoke else [])
        report = run_doctor(config_path, checked, gpu=None if smoke else cfg.train.gpu, fast=True)
        for f in report.findings:
            if f.severity in ("error", "warning"):
                console.print(f"[{'red' if f.severity == 'error' else 'yellow'}]{f.severity} {f.code}[/] "
                              + escape(f.message) + (f"  ({escape(str(f.where))})" if f.where else "")
                              + (f"\n    fix: {escape(f.fix)}" if f.fix else ""), soft_wrap=True)
        if report.errors:
            raise MMTuneError(f"mmtune doctor found {len(report.errors)} error(s); the run was not started",
                              fix="fix them (see above; `mmtune doctor CONFIG` for all checks), or --skip-checks")
    if smoke:
        return None  # a smoke run is on the CPU by definition: no GPU plan
    import torch

    if not (torch.cuda.is_available() and cfg.train.device != "cpu") and not cfg.train.gpu:
        return None
    try:
        from ..plan import predict
    except ImportError:
        return None
    plan = predict(cfg, gpu=cfg.train.gpu)
    console.print(f"plan: peak reserved {plan.peak_reserved_bytes / 2**30:.2f} GiB on {plan.gpu_name}, "
                  f"{'fits' if plan.fits else 'does NOT fit'}")
    if not plan.fits and not cfg.train.ignore_plan:
        raise MMTuneError(
            f"the planner predicts this run needs {plan.peak_reserved_bytes / 2**30:.2f} GiB, more than "
            f"{plan.gpu_name} offers", where="train / model / data settings",
            fix="run `mmtune plan CONFIG --search --gpu NAME` for a config that fits, or train.ignore_plan=true")
    return {"predicted_peak_bytes": int(plan.peak_allocated_bytes),
            "predicted_peak_reserved_bytes": int(plan.peak_reserved_bytes)}


def print_start_summary(run, notes) -> None:
    from rich.table import Table

    cfg = run.cfg
    t = Table(title=f"mmtune run -> {cfg.output_dir}", show_header=False, box=None)
    t.add_row("model", escape(f"{cfg.model.name} ({run.family.name}, {type(run.unwrapped_model()).__name__})"))
    t.add_row("method", f"{cfg.adapter.method}" + (f" r={cfg.adapter.r} alpha={cfg.adapter.lora_alpha}"
                                                   if cfg.adapter.method != "full" else ""))
    t.add_row("precision", f"{run.precision.precision} on {run.precision.device}")
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


def run_training(config_path, overrides: list[str], *, smoke: bool = False, skip_checks: bool = False) -> dict:
    from ..build import build_run
    from .loop import train

    cfg, notes = prepare_config(config_path, overrides, smoke=smoke)
    plan = preflight(cfg, config_path, overrides, skip_checks=skip_checks, smoke=smoke)
    run = build_run(cfg)
    if run.accelerator.is_main_process:
        print_start_summary(run, notes)
    return train(run, plan=plan)


def run_eval(config_path, overrides: list[str]) -> dict:
    """Evaluate checkpoint=DIR on the config's eval set; writes DIR/eval.json."""
    import json

    from ..build import build_run
    from ..evaluate.run_eval import evaluate
    from .checkpoint import latest_checkpoint, load_trainable, resolve_checkpoint

    ov = list(overrides)
    ckpt = None
    for o in list(ov):
        if o.startswith("checkpoint="):
            ckpt = Path(o.split("=", 1)[1])
            ov.remove(o)
    cfg, _ = prepare_config(config_path, ov)
    if ckpt is None:
        ckpt = latest_checkpoint(cfg.output_dir)
        if ckpt is None:
            raise MMTuneError("no checkpoint given and none found in output_dir", where=cfg.output_dir,
                              fix="mmtune eval CONFIG checkpoint=runs/.../checkpoint-N")
    ckpt = resolve_checkpoint(ckpt)
    if cfg.data.eval is None:
        raise MMTuneError("the config has no eval set", where="data.eval", fix="data.eval=path/to/eval.jsonl")
    run = build_run(cfg, with_optimizer=False)
    load_trainable(run.unwrapped_model(), ckpt, strict=False)
    metrics, preds = evaluate(run, run.eval_set.records[: cfg.data.eval_max_samples or None])
    (ckpt / "eval.json").write_text(json.dumps({"metrics": metrics, "predictions": preds}, indent=2))
    return metrics
