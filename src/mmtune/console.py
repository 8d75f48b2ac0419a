"""One rich console for the whole program, and the way user errors are printed (no traceback)."""

from __future__ import annotations

import functools
import sys

from rich.console import Console

console = Console(stderr=False, highlight=False)
# soft_wrap: error lines are not broken mid-sentence, so they can be grepped and copied whole.
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def user_errors(fn):
    """Decorator for CLI commands: an MMTuneError prints as what/where/fix and exits 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from rich.markup import escape

        from .errors import MMTuneError

        try:
            return fn(*args, **kwargs)
        except MMTuneError as e:
            # User text is escaped: a split name like [val] in a path must print, not vanish as markup.
            err_console.print(f"[bold red]error:[/] {escape(e.what)}")
            if e.where:
                err_console.print(f"  [bold]where:[/] {escape(str(e.where))}")
            if e.fix:
                err_console.print(f"  [bold]fix:[/]   {escape(str(e.fix))}")
            sys.exit(2)

    return wrapper
