"""`mmtune doctor`: every known failure mode checked on CPU before a GPU is rented.

One small check per failure mode (checks/*.py), registered with a stable code; a runner that builds
the pieces they inspect lazily (config, GPU spec, model on meta, adapters, one streaming data scan)
and turns every outcome, including a check that crashes, into a Finding. Nothing here imports torch
at import time.
"""

from .findings import Finding

__all__ = ["Finding", "run_doctor"]


def run_doctor(*args, **kwargs):
    from .runner import run_doctor as _run

    return _run(*args, **kwargs)
