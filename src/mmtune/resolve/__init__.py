"""One resolved run: every automatic decision of a run, made once, with its reason (see run.py)."""

from __future__ import annotations

from .decisions import Decision
from .run import DataSplit, MediaCaps, ResolvedRun, resolve_here, resolve_run
from .target import Target, gpu_target, local_target, target_for

__all__ = [
           "DataSplit",
           "Decision",
           "MediaCaps",
           "ResolvedRun",
           "Target",
           "gpu_target",
           "local_target",
           "resolve_here",
           "resolve_run",
           "target_for",
]
