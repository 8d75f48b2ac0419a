"""Auxiliary losses: extra terms added to the language-model loss inside the one optimizer step.

A loss is a subclass of `AuxLoss` registered under a name (`@register("heatmap")`); a run lists the
ones it uses in `train.aux_losses` (name, weight, schedule, options), checked when the config loads.
The step (train/step.py) adds `weight(step) * mean over the records that have a target` to the
token-mean LM loss before one backward, so accumulation, DDP and fp16 loss scaling treat both alike;
`lm_loss`, `aux/<name>` (unweighted) and the total `loss` are logged. See docs/aux_losses.md.

Imports nothing heavy: the config layer reads the registry at load time.
"""

from __future__ import annotations

from . import heatmap  # noqa: E402,F401 - registers the shipped loss
from .base import REGISTRY, AuxContext, AuxLoss, AuxTerm, build_terms, check_spec, register

__all__ = ["REGISTRY", "AuxContext", "AuxLoss", "AuxTerm", "build_terms", "check_spec", "register"]
