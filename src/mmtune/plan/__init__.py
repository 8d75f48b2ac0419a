"""`mmtune plan`: predict peak GPU memory and step time of the exact run without a GPU.

`predict(cfg, gpu=..., gpus=..., strategy=...) -> PlanResult` (see plan/planner.py). Nothing heavy is
imported until it is called.
"""

from __future__ import annotations

from .predict import predict  # noqa: E402 - a light module (the planner is imported when called)

__all__ = ["predict"]
