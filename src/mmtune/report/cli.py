"""`mmtune report RUN_DIR [RUN_DIR...] [--out FILE]`."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    from ..console import console, user_errors

    @app.command("report")
    @user_errors
    def report_cmd(
        run_dirs: list[Path] = typer.Argument(..., help="one run folder, or several to compare"),
        out: Path | None = typer.Option(None, "--out", help="HTML file (default: RUN/report.html for one run, "
                                                               "./mmtune-report.html for several)"),
    ):
        """A self-contained HTML report of a run (or a comparison of runs): curves, eval metrics, memory
        planned vs measured, decisions, skipped records, predictions next to references with their media."""
        from . import write_report

        path = write_report(run_dirs, out)
        console.print(f"report: {path} (one self-contained file; its charts also as SVG files beside it)")
