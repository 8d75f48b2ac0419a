"""One rich console for the whole program, the way user errors are printed (no traceback), and the
progress of long work (TaskBar)."""

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


# ------------------------------------------------------------------------------- progress of long work
# The training display (train/progress.py) registers its rich Progress here while it is live, so a task
# started inside it (an evaluation) becomes a line of the same display: rich allows one live display.
_live_progress: list = []
PLAIN_MIN = 200  # below this many items, a non-terminal gets no progress lines (the work is short)
PLAIN_EVERY = 10_000  # unknown totals: one plain line per this many items


def main_process() -> bool:
    """Rank 0 under torchrun / accelerate (RANK), or a single process: only it draws progress."""
    import os

    return os.environ.get("RANK", "0") == "0"


class TaskBar:
    """Progress of one long piece of work (a data scan, an evaluation, an export).

    On a terminal: a rich bar (transient: it disappears when done, the command's own result lines stay).
    Elsewhere (CI, a log file): plain lines at each quarter of the work (`label: 250/1000`), none for
    short work, one per PLAIN_EVERY items when the total is unknown."""

    def __init__(self, label: str, total: int | None, *, enabled: bool | None = None, out: Console | None = None):
        self.label, self.total, self.done = label, total, 0
        self.out = out or console
        self.enabled = main_process() if enabled is None else enabled
        self._p = self._task = None
        self._own = False

    def __enter__(self):
        if not self.enabled or not self.out.is_terminal:
            return self
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        if _live_progress:
            self._p = _live_progress[-1]
        else:
            self._p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                               TimeRemainingColumn(), console=self.out, transient=True)
            self._p.__enter__()
            self._own = True
        self._task = self._p.add_task(self.label, total=self.total, info="")  # `info`: the training display's column
        return self

    def advance(self, n: int = 1) -> None:
        before, self.done = self.done, self.done + n
        if not self.enabled:
            return
        if self._p is not None:
            self._p.update(self._task, completed=self.done)
            return
        if self.total is None:
            if self.done // PLAIN_EVERY > before // PLAIN_EVERY:
                self.out.print(f"{self.label}: {self.done}")
        elif self.total >= PLAIN_MIN and (4 * self.done) // self.total > (4 * before) // self.total:
            self.out.print(f"{self.label}: {self.done}/{self.total}")

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.remove_task(self._task)
            if self._own:
                self._p.__exit__(*exc)
        return False
