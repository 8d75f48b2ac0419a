"""`mmtune train`: config -> target decisions -> preflight (doctor, plan) -> this machine's run -> loop."""

from __future__ import annotations

from rich.markup import escape

from ..console import console, main_process
from ..errors import MMTuneError

# Preflight findings a --smoke run may ignore: it runs the tiny twin, so the real model need not be here.
SMOKE_IGNORES = {"MM024"}


def prepare_config(config_path, overrides: list[str], *, smoke: bool = False):
    """(config as written, config that runs, notes): the same unless --smoke swaps in the tiny twin."""
    from ..config import load_config
    from ..smoke import smoke_config

    cfg = load_config(config_path, overrides)
    if not smoke:
        return cfg, cfg, []
    run_cfg, notes = smoke_config(cfg)
    return cfg, run_cfg, notes


def resolve_target(cfg, *, smoke: bool = False):
    """The run as it will execute on its target GPU (train.gpu), else on this machine. The packages are this
    machine's (the run executes here), except under --smoke, where the real run's machine is elsewhere."""
    from ..resolve import resolve_run, target_for

    return resolve_run(cfg, target_for(cfg, local=False, assume_installed="gpu-extra" if smoke else "here"))


def resolve_runs(cfg, run_cfg, *, smoke: bool):
    """(the run on its target, the run this process launches, or None where that is the target's run and is
    resolved after the preflight). `--smoke` launches the tiny twin on the CPU, resolved here, before the
    preflight, so the checks of the launch (a DeepSpeed config's batch sizes and precision: MM048 / MM049)
    see what runs. A full run is resolved for this machine after the preflight: loading its processor for
    training may download it, and the doctor's findings come first."""
    from ..resolve import local_target, resolve_run

    target_run = resolve_target(cfg, smoke=smoke)
    if not smoke:
        return target_run, None
    if run_cfg.train.strategy != target_run.strategy:
        # The twin runs the strategy the real run decided on its target (auto weighs the real model).
        run_cfg = run_cfg.model_copy(update={"train": run_cfg.train.model_copy(update={"strategy": target_run.strategy})})
    return target_run, resolve_run(run_cfg, local_target(run_cfg.train.device), for_training=True)


def preflight_findings(target_run, config_path, overrides, *, launched=None, smoke: bool = False) -> list:
    """The doctor's fast checks on the target's resolved run (`launched`: the run this process launches, where
    it is another), less what a --smoke run may ignore; errors and warnings only."""
    from ..doctor.runner import run_doctor

    report = run_doctor(config_path, list(overrides), gpu=None, fast=True, resolved=target_run, launched=launched)
    return [f for f in report.findings if f.severity in ("error", "warning")
            and not (smoke and f.code in SMOKE_IGNORES)]


def preflight(target_run, config_path, overrides, *, skip_checks: bool, smoke: bool = False,
              launched=None) -> dict | None:
    """Doctor's fast checks (stop on errors) and the memory plan (refuse a run that will not fit), both
    on the resolved run of the target (the launch's own checks on `launched`, the run this process runs).
    Returns the predicted peak bytes when a GPU plan was made."""
    if not skip_checks:
        errors = []
        for f in preflight_findings(target_run, config_path, overrides, launched=launched, smoke=smoke):
            errors += [f] if f.severity == "error" else []
            console.print(f"[{'red' if f.severity == 'error' else 'yellow'}]{f.severity} {f.code}[/] "
                          + escape(f.message) + (f"  ({escape(str(f.where))})" if f.where else "")
                          + (f"\n    fix: {escape(f.fix)}" if f.fix else ""), soft_wrap=True)
        if errors:
            raise MMTuneError(f"mmtune doctor found {len(errors)} error(s); the run was not started",
                              fix="fix them (see above; `mmtune doctor CONFIG` for all checks), or --skip-checks")
    if smoke or target_run.target.gpu is None:
        return None  # a smoke run is on the CPU by definition; no GPU, no GPU plan
    try:
        from ..plan import predict
    except ImportError:
        return None
    from ..plan.margin import verdict_line

    plan = predict(target_run)
    console.print(f"plan: peak reserved {plan.peak_reserved_bytes / 2**30:.2f} GiB; {escape(verdict_line(plan))}",
                  soft_wrap=True)
    if not plan.fits and not target_run.cfg.train.ignore_plan:
        raise MMTuneError(
            f"the planner predicts this run does not fit: {verdict_line(plan)}", where="train / model / data settings",
            fix=f"`mmtune plan CONFIG --gpu {plan.gpu_id}` prints the smallest changes that make it fit as key=value "
                "lines; or train.ignore_plan=true")
    return {"predicted_peak_bytes": int(plan.peak_allocated_bytes),
            "predicted_peak_reserved_bytes": int(plan.peak_reserved_bytes)}


def run_training(config_path, overrides: list[str], *, smoke: bool = False, skip_checks: bool = False) -> dict:
    import time

    from ..build import build_run
    from ..resolve import local_target, resolve_run
    from ..train.lock import output_dir_lock
    from ..train.loop import train
    from ..train.summary import print_start_summary

    t_start = time.perf_counter()
    cfg, run_cfg, notes = prepare_config(config_path, overrides, smoke=smoke)
    target_run, launched = resolve_runs(cfg, run_cfg, smoke=smoke)
    if smoke:
        # What the real run will decide on its target, said before the twin runs on the CPU.
        notes = [f"on {target_run.target.describe()}: {line}" for line in target_run.summary_lines()
                 if not line.startswith("target:")] + notes
    t0 = time.perf_counter()
    plan = preflight(target_run, config_path, overrides, skip_checks=skip_checks, smoke=smoke, launched=launched)
    preflight_s = round(time.perf_counter() - t0, 2)
    # Where the target is this machine and its processor is the model's own, the target's resolved run is
    # this run: not resolved (and the processor not loaded) a second time.
    same = target_run.target.local and target_run.processor is not None and target_run.exact_text_tokens
    here = launched if launched is not None else target_run if same else resolve_run(
        run_cfg, local_target(run_cfg.train.device), for_training=True)
    # One process per output_dir, checked before minutes of model loading (the loop holds it re-entrantly).
    with output_dir_lock(here.cfg.output_dir, enabled=main_process()):
        t_build = time.perf_counter()
        run = build_run(here)
        # Where start-up time goes (summary.json `startup`; benchmarks/first_step.py prints it).
        run.startup = {"config_and_resolve_s": round(t_build - t_start - preflight_s, 2), "preflight_s": preflight_s,
                       "build_s": round(time.perf_counter() - t_build, 2), **run.startup}
        if run.accelerator.is_main_process:
            print_start_summary(run, notes)
        from .startup_gc import restore_default

        restore_default()  # start-up is over: the loop collects at Python's default pace, as before
        return train(run, plan=plan)
