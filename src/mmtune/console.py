"""One rich console for the whole program, and the way user errors are printed (no traceback)."""

from __future__ import annotations

import functools
import sys

from rich.console import Console

console = Console(stderr=False, highlight=False)
err_console = Console(stderr=True, highlight=False)


def user_errors(fn):
    """Decorator for CLI commands: an MMTuneError prints as what/where/fix and exits 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from .errors import MMTuneError

        try:
            return fn(*args, **kwargs)
        except MMTuneError as e:
            err_console.print(f"[bold red]error:[/] {e.what}")
            if e.where:
                err_console.print(f"  [bold]where:[/] {e.where}")
            if e.fix:
                err_console.print(f"  [bold]fix:[/]   {e.fix}")
            sys.exit(2)

    return wrapper
