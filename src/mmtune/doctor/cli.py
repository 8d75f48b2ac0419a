"""`mmtune doctor CONFIG.yaml [key=value ...] [--gpu NAME] [--json] [--write-clean PATH] [--fast] [--full] [--limit N]`."""

from __future__ import annotations

import json
import sys
from typing import List, Optional

import typer


def group_not_run(not_run) -> list[tuple[str, list[tuple[str, str]]]]:
    """[(reason, [(code, title), ...])] in first-seen order: each reason once, its checks under it."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for code, title, reason in not_run:
        groups.setdefault(reason, []).append((code, title))
    return list(groups.items())


def render(report, console) -> None:
    """Findings grouped by severity (code, what, where), each table followed by its fixes as whole lines;
    then the data table and the checks that did not run; last the verdict and the errors' fixes.

    A fix is never a table cell: a narrow column breaks a command like `train.micro_batch_size=1` mid-word,
    and the pieces cannot be copied. Fix lines are printed unwrapped (the terminal soft-wraps them)."""
    from rich.markup import escape
    from rich.table import Table

    styles = {"error": "bold red", "warning": "yellow", "info": "cyan"}
    for sev in ("error", "warning", "info"):
        items = [f for f in report.findings if f.severity == sev]
        if not items:
            continue
        table = Table(title=f"{sev}s ({len(items)})", title_style=styles[sev], show_lines=True, expand=True)
        table.add_column("code", no_wrap=True)
        table.add_column("what", ratio=3, overflow="fold")
        table.add_column("where", ratio=2, overflow="fold")
        for f in items:
            table.add_row(f.code, escape(f.message), escape(f.where or ""))
        console.print(table)
        if sev != "error":  # the errors' fixes close the report, under the verdict
            _fix_lines(items, console)
    scan = report.tables.get("data")
    if scan is not None:
        table = Table(title="data", expand=False)
        for col in ("split", "records", "ok", "bad", "reason"):
            table.add_column(col)
        for row in scan.table_rows():
            table.add_row(*[str(x) for x in row])
        console.print(table)
    if report.not_run:
        console.print(f"[dim]{len(report.not_run)} check(s) not run:[/]")
        for reason, checks in group_not_run(report.not_run):
            # One line per check; a reason shared by several checks is said once, above them.
            if len(checks) == 1:
                console.print(f"[dim]  {checks[0][0]} {checks[0][1]}: {escape(reason)}[/]")
                continue
            console.print(f"[dim]  {escape(reason)}:[/]")
            for code, title in checks:
                console.print(f"[dim]    {code} {title}[/]")
    n_err, n_warn = len(report.errors), sum(f.severity == "warning" for f in report.findings)
    colour = "red" if n_err else ("yellow" if n_warn else "green")
    console.print(f"[{colour}]{n_err} error(s), {n_warn} warning(s)[/] in {report.total_seconds:.1f} s")
    _fix_lines(report.errors, console)


def _fix_lines(findings, console) -> None:
    from rich.markup import escape

    for f in findings:
        if f.fix:
            console.print(f"  {f.code} fix: {escape(f.fix)}", soft_wrap=True, highlight=False)


def doctor_command(
    config: str = typer.Argument(..., help="the run's YAML config"),
    overrides: Optional[List[str]] = typer.Argument(None, help="dotted.key=value overrides"),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="target GPU id, e.g. t4, a100-80gb"),
    as_json: bool = typer.Option(False, "--json", help='print {"findings": [...]} instead of tables'),
    write_clean: Optional[str] = typer.Option(None, "--write-clean", help="write the records that pass to PATH"),
    fast: bool = typer.Option(False, "--fast", help="only the fast checks `mmtune train` runs first"),
    full: bool = typer.Option(False, "--full", help="decode every record's media (without it, a split with more than "
                                                    "1000 records with media decodes a random sample of 1000)"),
    assume_installed: str = typer.Option("gpu-extra", "--assume-installed", help="the target machine's optional "
                                         "packages: gpu-extra (the gpu extra's: flash-attn, liger-kernel, bitsandbytes), "
                                         "none (core only) or here (this machine's)"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1,
                                        help="read only the first N records of each split (a quick look at a large set)"),
) -> None:
    """Check a config, its data, model and target GPU on CPU; exit 1 on any error."""
    from ..console import console
    from .runner import run_doctor

    if limit is not None and write_clean:
        # The clean file would silently lack every record past the first N.
        raise typer.BadParameter("--write-clean writes every record that passes: it cannot be combined with --limit",
                                 param_hint="--limit")
    report = run_doctor(config, overrides or [], gpu, fast=fast, write_clean=write_clean, full=full, max_records=limit,
                        assume_installed=assume_installed)
    if as_json:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        render(report, console)
    raise typer.Exit(1 if report.errors else 0)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_command)
