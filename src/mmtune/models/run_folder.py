"""model.name that names an mmtune run folder, or a folder inside one: the fix is an export, not save_pretrained.

A two-stage recipe (LLaVA's projector pretraining, then instruction tuning) starts stage 2 from stage 1's model.
`mmtune train` writes checkpoints into its run folder, never a loadable model folder beside them, and
`mmtune export` refuses an --out inside the run folder (checkpoint rotation would delete it). So a stage-2
model.name of `runs/x/stage1/final` can never exist, and `runs/x/stage1` itself is not a model: users saw
"does not exist" / "lacks config.json" with the fix "save the model with save_pretrained", which names nothing
they can run. The fix here is the export command that writes the folder.
"""

from __future__ import annotations

from pathlib import Path

RUN_MARKER = "config.resolved.yaml"  # written by every `mmtune train` into its output_dir


def enclosing_run(path: Path) -> Path | None:
    """The mmtune run folder that `path` is, or lies inside (up to two levels), else None."""
    for folder in (path, *list(path.parents)[:2]):
        if (folder / RUN_MARKER).is_file():
            return folder
    return None


def _method(run: Path) -> str | None:
    try:
        import yaml

        tree = yaml.safe_load((run / RUN_MARKER).read_text()) or {}
        return (tree.get("adapter") or {}).get("method")
    except Exception:  # an unreadable resolved config only loses the --merge hint
        return None


def export_fix(name: str) -> tuple[str, str] | None:
    """(what, fix) when model.name `name` is an mmtune run folder or a path inside one; None otherwise."""
    path = Path(name).expanduser()
    run = enclosing_run(path)
    if run is None:
        return None
    method = _method(run)
    merge = " --merge" if method and method != "full" else ""
    out = run.parent / f"{run.name}-final"  # beside the run: mmtune export refuses an --out inside it
    what = (f"model.name={name} is the mmtune run folder {run}: it holds checkpoints, not a model folder"
            if path == run else
            f"model.name={name} lies inside the mmtune run folder {run}, which holds checkpoints and never an "
            "exported model (mmtune export writes outside the run folder)")
    kind = f"adapter.method={method}, so the LoRA weights are merged in" if merge else "the run's trained model"
    fix = (f"export it first: mmtune export {run}{merge} --out {out}   ({kind}), then model.name={out}")
    return what, fix
