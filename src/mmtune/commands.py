"""Core sub-commands: train, eval, export. (plan, doctor, data, download register themselves.)"""

from __future__ import annotations

import typer


def register_core(app: typer.Typer) -> None:
    pass
