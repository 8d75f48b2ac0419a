"""SIGTERM / SIGINT during training: finish the optimizer step, save, write the summary so far, exit.

A spot instance gets SIGTERM some seconds before it disappears; Ctrl-C is SIGINT. Both are turned
into a request the loop reads after each step (never an exception in the middle of an optimizer
update, which would leave weights and optimizer state out of step). A second signal means "now":
the process exits at once without saving (what the last checkpoint holds is kept).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

HANDLED = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """Context manager: while inside, the first SIGTERM/SIGINT sets `.signal_name`; a second exits."""

    def __init__(self):
        self.signal_name: str | None = None
        self._old: dict = {}

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.signal_name is not None:
            os.write(2, f"\n{name} again: exiting now without saving; the last checkpoint is kept\n".encode())
            os._exit(128 + signum)
        self.signal_name = name
        sys.stderr.write(f"\n{name} received: finishing the current step, then saving a checkpoint and the "
                         f"summary so far (send it again to exit at once)\n")
        sys.stderr.flush()

    def __enter__(self):
        # Handlers can only be installed from the main thread (a run started from another thread,
        # e.g. inside a notebook's worker, keeps the default behaviour).
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._handle) for s in HANDLED}
        return self

    def __exit__(self, *exc):
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old = {}
        return False
