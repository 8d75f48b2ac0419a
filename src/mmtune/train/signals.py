"""SIGTERM / SIGINT during training: finish the optimizer step, save, write the summary so far, exit.

A spot instance gets SIGTERM some seconds before it disappears; Ctrl-C is SIGINT. Both are turned
into a request the loop reads after each step (never an exception in the middle of an optimizer
update, which would leave weights and optimizer state out of step). A second signal means "now":
the process exits at once without saving (what the last checkpoint holds is kept).

SIGHUP (the terminal went away: an ssh connection dropped, a closed laptop lid, a Colab tab without tmux or nohup)
is a stop request too; its default action killed the run with nothing saved since the last checkpoint. A dead
terminal fails every write with EIO, so the process's stdout and stderr are pointed at /dev/null first (what nohup
would have done; summary.json still says "interrupted": "SIGHUP"), and a repeated SIGHUP (the shell forwards its
own, then the kernel sends one when the session ends) is not taken for the user's "again".
"""

from __future__ import annotations

import os
import signal
import sys
import threading

HANDLED = (signal.SIGTERM, signal.SIGINT) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())


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
        hangup = name == "SIGHUP"
        if hangup:
            _detach_from_terminal()
        if self.signal_name is not None:
            if hangup:
                return  # the terminal's end, said again: not the user's "now"
            os.write(2, f"\n{name} again: exiting now without saving; the last checkpoint is kept\n".encode())
            os._exit(128 + signum)
        self.signal_name = name
        try:
            sys.stderr.write(f"\n{name} received: finishing the current step, then saving a checkpoint and the "
                             f"summary so far (send it again to exit at once)\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr closed or its terminal gone: the stop goes on regardless
            pass

    def __enter__(self):
        # Handlers can only be installed from the main thread (a run started from another thread,
        # e.g. inside a notebook's worker, keeps the default behaviour).
        if threading.current_thread() is threading.main_thread():
            # A signal the run was started ignoring stays ignored: `nohup mmtune train` must not stop at a hangup.
            self._old = {s: signal.signal(s, self._handle) for s in HANDLED if signal.getsignal(s) is not signal.SIG_IGN}
        return self

    def __exit__(self, *exc):
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old = {}
        return False


def _detach_from_terminal() -> None:
    """Point stdout and stderr at /dev/null: after a hangup each write to the terminal fails (EIO), and a failed
    progress-bar write would end the run in the middle of its stop instead of saving."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    for fd in (1, 2):
        try:
            os.dup2(null, fd)
        except OSError:
            pass
    os.close(null)
