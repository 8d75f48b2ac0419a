"""The training display: step, loss, lr, tokens/s, the next evaluation and the time left.

On a terminal, a rich progress bar (redrawn in place); elsewhere (CI, a log file, `| tee`) the plain
line `step N/TOTAL  loss L  lr R  T tok/s` every 10 steps and at the last, the format logs are grepped
for. Silent on non-main ranks. While it is live, other progress (an evaluation's batches) joins it as a
line of the same display (console.TaskBar)."""

from __future__ import annotations

from .. import console as _console

PLAIN_EVERY = 10  # steps between plain lines when not on a terminal


class Progress:
    def __init__(self, total: int, start: int = 0, enabled: bool = True, *, eval_every: int | None = None,
                 out=None):
        self.total, self.start, self.enabled, self.eval_every = total, start, enabled, eval_every
        self.out = out or _console.console
        self._p = None

    def __enter__(self):
        if self.enabled and self.out.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._p = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                               TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TextColumn("ETA"),
                               TimeRemainingColumn(), console=self.out, transient=False)
            self._p.__enter__()
            self._task = self._p.add_task("train", total=self.total, completed=self.start, info=self._eval_in(self.start))
            _console._live_progress.append(self._p)
        return self

    def _eval_in(self, step: int) -> str:
        if not self.eval_every:
            return ""
        left = min(self.eval_every - step % self.eval_every, self.total - step)
        return f"eval in {left}" if left else ""

    def update(self, step: int, *, loss: float, lr: float, tokens_per_s: float) -> None:
        if not self.enabled:
            return
        text = f"loss {loss:.4g}  lr {lr:.2e}  {tokens_per_s:,.0f} tok/s"
        if self._p is not None:
            countdown = self._eval_in(step)
            self._p.update(self._task, completed=step, info=text + (f"  {countdown}" if countdown else ""))
        elif step % PLAIN_EVERY == 0 or step == self.total:
            self.out.print(f"step {step}/{self.total}  {text}")

    def note(self, text: str) -> None:
        if self.enabled:
            self.out.print(text)

    def __exit__(self, *exc):
        if self._p is not None:
            _console._live_progress.remove(self._p)
            self._p.__exit__(*exc)
        return False
