"""`mmtune data ...` commands."""

from __future__ import annotations

import typer

from ..console import user_errors

data_app = typer.Typer(add_completion=False, no_args_is_help=True,
                       help="Look at a dataset the way training will see it.")


@data_app.command("inspect")
@user_errors
def inspect_cmd(
    config: str = typer.Argument(..., help="run config YAML"),
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides"),
    split: str = typer.Option("train", "--split", help="train or eval"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
    examples: int = typer.Option(3, "--examples", help="rendered examples to show"),
) -> None:
    """Counts ok/bad by reason, token lengths by modality, and examples with the label mask. Exit 1 when
    records are bad under data.on_bad_record=error (training would stop at the first)."""
    import json

    from ..config import load_config
    from ..console import console
    from ..resolve import resolve_run, target_for
    from .inspect import inspect_data

    cfg = load_config(config, overrides or [])
    resolved = resolve_run(cfg, target_for(cfg, local=False), require_processor=True)
    report = inspect_data(resolved, split=split, n_examples=examples)
    if as_json:
        console.print_json(json.dumps(report))
    else:
        _print(report)
    if report["bad"] and report["on_bad_record"] == "error":
        raise typer.Exit(1)  # every bad record counted above; training, as configured, would stop at the first


def _print(report: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ..console import console

    console.print(f"[bold]{report['spec']}[/] ({report['split']}) for {report['model']}: "
                  f"[green]{report['ok']} ok[/], "
                  + (", ".join(f"[red]{n} {reason}[/]" for reason, n in sorted(report["bad"].items())) or "0 bad"))
    for note in report["notes"]:
        console.print(f"  note: {escape(note)}")
    for p in report["problems"][:10]:
        console.print(f"  [red]bad[/] {escape(p['where'])}: {escape(p['what'])}")
    t = Table(title=f"tokens per record (data.max_length={report['max_length']})")
    t.add_column("kind")
    for c in ("max", "p95", "mean"):
        t.add_column(c, justify="right")
    for kind, d in report["tokens"].items():
        if kind != "total" and d["max"] == 0:
            continue
        t.add_row(kind, str(d["max"]), str(d["p95"]), f"{d['mean']:.1f}")
    console.print(t)
    for ex in report["examples"]:
        console.print(f"[bold]{escape(ex['id'])}[/] ({escape(ex['source'])}, {ex['tokens']} tokens; "
                      "trained-on tokens in [[...]]):")
        console.print(escape(ex["rendered"]))


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
