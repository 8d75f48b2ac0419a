"""Learning-rate schedule: linear warmup, then cosine / linear decay to zero, or constant."""

from __future__ import annotations

import math


def lr_factor(step: int, *, warmup: int, total: int, kind: str) -> float:
    """Multiplier of the base LR for the optimizer step about to run (0-based `step`)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if kind == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    progress = min(max(progress, 0.0), 1.0)
    if kind == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def make_scheduler(optimizer, *, warmup: int, total: int, kind: str, scale=None):
    """`scale(step)`: an extra multiplier (the current stage's lr_multiplier, mmtune/stages.py)."""
    from torch.optim.lr_scheduler import LambdaLR

    if scale is None:
        return LambdaLR(optimizer, lambda s: lr_factor(s, warmup=warmup, total=total, kind=kind))
    return LambdaLR(optimizer, lambda s: lr_factor(s, warmup=warmup, total=total, kind=kind) * scale(s))
