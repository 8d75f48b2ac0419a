"""A rich progress bar showing step, loss, lr and tokens/s; silent on non-main ranks and when piped."""

from __future__ import annotations

from ..console import console


class Progress:
    def __init__(self, total: int, start: int = 0, enabled: bool = True):
        self.total, self.start, self.enabled = total, start, enabled
        self._p = None

    def __enter__(self):
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._p = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                               TextColumn("{task.fields[info]}"), TimeRemainingColumn(), console=console,
                               transient=False, disable=not console.is_terminal)
            self._p.__enter__()
            self._task = self._p.add_task("train", total=self.total, completed=self.start, info="")
        return self

    def update(self, step: int, *, loss: float, lr: float, tokens_per_s: float) -> None:
        if self._p:
            self._p.update(self._task, completed=step,
                           info=f"loss {loss:.4g}  lr {lr:.2e}  {tokens_per_s:,.0f} tok/s")
            if not console.is_terminal and (step % 10 == 0 or step == self.total):
                console.print(f"step {step}/{self.total}  loss {loss:.4g}  lr {lr:.2e}  {tokens_per_s:,.0f} tok/s")

    def note(self, text: str) -> None:
        if self.enabled:
            console.print(text)

    def __exit__(self, *exc):
        if self._p:
            self._p.__exit__(*exc)
        return False
