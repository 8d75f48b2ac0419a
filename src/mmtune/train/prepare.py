"""What the loop sets up before its first step: the output folder (a checkpoint resumed through the
resume guard, or an earlier run's logs and checkpoints cleared), config.resolved.yaml with every decision,
and the auxiliary loss terms."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..console import console
from ..errors import MMTuneError
from .checkpoint import clean_leftovers, list_checkpoints, load_checkpoint, newest_valid_checkpoint, read_meta
from .data_fingerprint import fingerprint


@dataclass
class Start:
    """Where the loop starts: step 0 of a fresh run, or a verified checkpoint's state."""

    step: int = 0
    position: dict = field(default_factory=lambda: {"epoch": 0, "index": 0})
    best: dict = field(default_factory=lambda: {"value": None, "step": None, "path": None})
    eval_metrics: dict = field(default_factory=dict)
    history: list = field(default_factory=list)  # config changes accepted on resume, carried from checkpoint to checkpoint
    checkpoint: Path | None = None  # the checkpoint resumed from
    finished: dict | None = None  # the summary of a run that already finished: nothing to do
    data: dict = field(default_factory=dict)  # the training data's fingerprint at start, saved with each checkpoint


def prepare_output(run) -> Start:
    """The output folder made ready for the loop, on the main rank; every rank loads the checkpoint."""
    cfg = run.cfg
    out = Path(cfg.output_dir)
    main = run.accelerator.is_main_process
    st = Start()
    if main:
        out.mkdir(parents=True, exist_ok=True)
        for name in clean_leftovers(out):
            console.print(f"removed {name}: the leftover of a checkpoint save that did not finish")
    st.data = fingerprint(cfg)  # before the guard compares it, as the data is now
    ckpt = st.checkpoint = resume_source(out) if cfg.train.resume else None
    if ckpt is not None:
        from . import resume_guard

        meta = read_meta(ckpt)
        changes = resume_guard.check(ckpt, cfg, meta["step"], meta.get("data"), st.data,
                                     processes=run.accelerator.num_processes)
        state = load_checkpoint(run, ckpt)
        st.step, st.position, st.best = state["step"], state["position"], state["best"]
        st.eval_metrics = meta.get("metrics", {})
        st.history = list(state.get("accepted_changes", []))
        if changes:
            st.position = resume_guard.apply(changes, st.position)
            st.history.append({"step": st.step, "changes": {k: list(v) for k, v in changes.items()}})
            console.print("[yellow]resuming with changed settings (train.accept_changes=true):[/] "
                          + "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changes.items()))
        if main:
            dropped = resume_guard.truncate_logs(out, st.step)
            if dropped:
                console.print(f"logs cut back to step {st.step} (the work after it is done again): "
                              + ", ".join(f"{n} row(s) of {name}" for name, n in dropped.items()))
        console.print(f"[bold]resumed[/] from {ckpt} at step {st.step}")
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
    if ckpt is not None and st.step >= cfg.train.max_steps:
        st.finished = _finished_summary(out, st.step)
        if st.finished is not None:  # nothing to do: never overwrite the results of a finished run
            console.print(f"this run already finished at step {st.step}; {out / 'summary.json'} kept. To train "
                          "longer raise train.max_steps (with train.accept_changes=true); to start over, "
                          "train.resume=false")
    return st


def resume_source(out: Path):
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


def _finished_summary(out: Path, step: int) -> dict | None:
    """A finished run's summary.json, when it is complete for this step (not an interrupted one's)."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if summary.get("steps") == step and not summary.get("interrupted") else None


def aux_terms(run) -> list:
    """train.aux_losses as AuxTerms, reading the model's image token id and the processor's merge."""
    if not run.cfg.train.aux_losses:
        return []
    from ..aux_losses import AuxContext, build_terms

    return build_terms(run.cfg.train.aux_losses, AuxContext.of(run.unwrapped_model().config, run.processor))
