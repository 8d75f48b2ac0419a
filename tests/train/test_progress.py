"""Progress everywhere (issue 15): a rich display on a terminal, the plain line format elsewhere."""

from __future__ import annotations

import io

from rich.console import Console

from mmtune.console import TaskBar
from mmtune.train.progress import Progress


def _console(tty: bool) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=tty, width=160, color_system=None if not tty else "standard"), buf


def test_training_lines_when_not_a_terminal():
    out, buf = _console(False)
    with Progress(total=25, out=out, eval_every=5) as bar:
        for step in range(1, 26):
            bar.update(step, loss=1.0 / step, lr=1e-4, tokens_per_s=1234.5)
    lines = buf.getvalue().splitlines()
    assert lines == ["step 10/25  loss 0.1  lr 1.00e-04  1,234 tok/s", "step 20/25  loss 0.05  lr 1.00e-04  1,234 tok/s",
                     "step 25/25  loss 0.04  lr 1.00e-04  1,234 tok/s"]  # the format CI logs are read in


def test_training_display_on_a_terminal():
    out, buf = _console(True)
    with Progress(total=20, start=2, out=out, eval_every=5) as bar:
        for step in range(3, 19):
            bar.update(step, loss=0.5, lr=2e-4, tokens_per_s=900)
    text = buf.getvalue()
    assert "train" in text and "18/20" in text and "loss 0.5" in text and "900 tok/s" in text
    assert "eval in 2" in text and "ETA" in text  # next evaluation at step 20; the time left
    assert "step 10/20" not in text  # no plain lines on a terminal


def test_task_progress_plain_lines_by_quarter():
    out, buf = _console(False)
    with TaskBar("check train data", 400, out=out, enabled=True) as bar:
        for _ in range(400):
            bar.advance()
    assert buf.getvalue().splitlines() == [f"check train data: {n}/400" for n in (100, 200, 300, 400)]
    out, buf = _console(False)
    with TaskBar("short", 10, out=out, enabled=True) as bar:
        for _ in range(10):
            bar.advance()
    assert buf.getvalue() == ""  # short work says nothing
    out, buf = _console(False)
    with TaskBar("doctor: train data", None, out=out, enabled=True) as bar:
        bar.advance(25_000)
    assert buf.getvalue().splitlines() == ["doctor: train data: 25000"]


def test_task_progress_on_a_terminal_joins_the_training_display():
    out, buf = _console(True)
    with TaskBar("export", 4, out=out, enabled=True) as bar:  # standalone: its own transient bar
        bar.advance(2)
        assert bar._p is not None and bar._p.tasks[0].completed == 2
    with Progress(total=10, out=out) as train_bar:
        with TaskBar("eval answers", 8, out=out, enabled=True) as ev:
            ev.advance(8)
            assert ev._p is train_bar._p and [t.description for t in train_bar._p.tasks] == ["train", "eval answers"]
        assert [t.description for t in train_bar._p.tasks] == ["train"]  # gone when the evaluation ends


def test_other_ranks_draw_nothing(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    out, buf = _console(False)
    with TaskBar("check train data", 400, out=out) as bar:
        bar.advance(400)
    assert buf.getvalue() == ""
