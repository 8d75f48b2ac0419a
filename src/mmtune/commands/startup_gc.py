"""The garbage collector's pace during a command's start-up.

Start-up imports torch, transformers and peft: about a million objects that live as long as the process. At
Python's default pace (a young collection every 700 net allocations, a full one every 10 young ones once the
old generation has grown by a quarter) the collector walks all of them in 6-9 full passes while they are
being imported and a model is built: 0.8 s of a 5.4 s tiny-twin doctor's CPU and 1.9 s of a 8.9 s 7B plan's
(gc.callbacks, load ~15; docs/startup.md). With young collections every 10,000 allocations those full
passes do not happen during start-up; cycles are still collected, a little later. `mmtune train` returns to
the default pace before its loop, whose memory behaviour stays what it was.
"""

from __future__ import annotations

import gc

STARTUP_THRESHOLD = (10_000, 10, 10)
_default: tuple[int, int, int] | None = None


def relax_for_startup() -> None:
    """Collect at the start-up pace (the command line calls it once, before the command runs)."""
    global _default
    if _default is None:
        _default = gc.get_threshold()
    gc.set_threshold(*STARTUP_THRESHOLD)


def restore_default() -> None:
    """Back to the pace the process had before `relax_for_startup` (a no-op where it was never relaxed)."""
    if _default is not None:
        gc.set_threshold(*_default)
