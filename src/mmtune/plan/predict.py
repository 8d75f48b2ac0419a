"""`mmtune.plan.predict.predict` (the doctor imports the planner from here); see plan/planner.py."""

from __future__ import annotations


def predict(cfg, **kwargs):
    from .planner import predict as _predict

    return _predict(cfg, **kwargs)
