"""`mmtune plan`: predict peak GPU memory and step time of the exact run without a GPU.

`predict(cfg, gpu=..., gpus=..., strategy=...) -> PlanResult` (see plan/planner.py). Nothing heavy is
imported until it is called.
"""

from __future__ import annotations


def predict(cfg, **kwargs):
    from .planner import predict as _predict

    return _predict(cfg, **kwargs)


__all__ = ["predict"]
