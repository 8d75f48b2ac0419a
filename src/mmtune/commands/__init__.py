"""The commands layer: what a command does, composed from the parts below it.

`train` = load config -> resolve for the target -> preflight (doctor's fast checks, the memory plan)
-> resolve for this machine -> build -> the loop. The parts (train/, plan/, doctor/, evaluate/) never
import each other; only this layer (and the CLI above it) puts them together (docs/internals.md).
Core sub-commands registered here: train, eval, export (plan, doctor, data, download register
themselves from their own cli modules).
"""

from __future__ import annotations

from pathlib import Path

import typer

from ..console import console, main_process, user_errors

CONFIG_ARG = typer.Argument(..., help="YAML config (a recipe), e.g. recipes/demo_counting.yaml")
OVERRIDES_ARG = typer.Argument(None, help="dotted key=value overrides, e.g. train.max_steps=50 profile=t4_qlora")


# Unknown `--flags` reach the overrides, whose parser names the key=value that says each (an HF script's
# `--learning_rate 2e-4` -> train.lr=2e-4) instead of click's bare "No such option".
OPEN_OPTIONS = {"ignore_unknown_options": True, "allow_extra_args": True}


def register_core(app: typer.Typer) -> None:
    app.command("train", context_settings=OPEN_OPTIONS)(train_cmd)
    app.command("eval", context_settings=OPEN_OPTIONS)(eval_cmd)
    app.command("export")(export_cmd)


@user_errors
def train_cmd(
    config: Path | None = typer.Argument(None, help="YAML config (a recipe), e.g. recipes/demo_counting.yaml"),
    overrides: list[str] | None = OVERRIDES_ARG,
    recipe: str | None = typer.Option(None, "--recipe", help="a recipe shipped with mmtune, e.g. demo_counting"),
    smoke: bool = typer.Option(False, "--smoke", help="run through a tiny random twin of the model on CPU"),
    skip_checks: bool = typer.Option(False, "--skip-checks", help="do not run the doctor's fast checks first"),
):
    """Fine-tune: plan and check first, then train, evaluate and checkpoint."""
    from ..config.loader import find_config
    from .train import run_training

    if recipe is not None and config is not None:  # `--recipe NAME key=value`: the first override is no config
        overrides, config = [str(config), *(overrides or [])], None
    if (recipe or config) is None:
        from ..errors import ConfigError

        raise ConfigError("no config given", fix="mmtune train CONFIG.yaml, or mmtune train --recipe demo_counting")
    summary = run_training(find_config(recipe or config), overrides or [], smoke=smoke, skip_checks=skip_checks)
    console.print_json(data={k: summary[k] for k in ("eval", "baseline", "tokens_per_s", "data_wait_fraction",
                                                      "wall_s", "peak_memory_bytes") if k in summary})
    if main_process():  # under torchrun / accelerate launch, the first process reports
        from ..report import next_steps, write_report_quietly

        write_report_quietly(summary["output_dir"])
        console.print(next_steps(summary["output_dir"]), soft_wrap=True)


@user_errors
def eval_cmd(config: Path = CONFIG_ARG, overrides: list[str] | None = OVERRIDES_ARG):
    """Evaluate a checkpoint: mmtune eval CONFIG checkpoint=DIR (and any key=value overrides)."""
    from .evaluate import run_eval

    metrics = run_eval(config, overrides or [])
    console.print_json(data=metrics)


@user_errors
def export_cmd(
    checkpoint: Path = typer.Argument(..., help="a checkpoint folder, or a run folder (its best, else latest)"),
    merge: bool = typer.Option(False, "--merge", help="merge LoRA into the base weights"),
    out: Path | None = typer.Option(None, "--out", help="output folder (default: <checkpoint>/export)"),
    push_to_hub: str | None = typer.Option(None, "--push-to-hub", help="also upload it to the Hub repo ORG/NAME"),
    private: bool = typer.Option(False, "--private", help="with --push-to-hub: create the repo private"),
):
    """Export a loadable folder: the PEFT adapter, or with --merge a merged transformers model; a model card
    (README.md) says what it is and how to load it."""
    import json

    from rich.markup import escape

    from ..export import MARKER, export

    path = export(checkpoint, merge=merge, out=out, push_to_hub=push_to_hub, private=private)
    marker = json.loads((path / MARKER).read_text())
    console.print(f"exported {marker['checkpoint']} ({marker.get('kind', 'merged' if merge else 'adapter')}) to {path}"
                  f"{f' and pushed to {push_to_hub}' if push_to_hub else ''}; how to load it: {path / 'README.md'}",
                  soft_wrap=True)
    for note in marker.get("notes", []):
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
