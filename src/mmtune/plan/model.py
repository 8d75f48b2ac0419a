"""The run's model for a plan: real architecture and size, weights never materialised.

Built by the one builder every command uses (`build.build_model_and_adapters` on `meta`), then every
parameter and buffer becomes a fake tensor of the same shape and dtype (`materialize_fake`). The config
comes from a tiny twin, a folder on disk, an embedded public config or the local HF cache
(`models.model_config.meta_config`); the processor from the resolved run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PlannedModel:
    model: Any
    family: Any
    hf_config: Any
    processor: Any
    param_groups: list
    adapter_table: Any
    quantized_layers: int = 0
    decisions: list[str] = field(default_factory=list)
    objective: Any = None  # the objective the trace ran (plan/grpo.py's keeps its generation phase)


def build_planned_model(resolved) -> PlannedModel:
    """The run's model through the one builder (build.build_model_and_adapters, materialised on meta:
    same class, attention, quantization (packed 4-bit stand-in), checkpointing and adapters as train)."""
    from ..build import build_model_and_adapters

    loaded, result = build_model_and_adapters(resolved, meta=True)
    nq = sum(1 for m in loaded.model.modules() if type(m).__name__ == "PlannedLinear4bit")
    decisions = list(loaded.decisions)
    if resolved.cfg.train.fused_kernels == "liger":  # decided in the resolved run: the twins of Liger's kernels
        from .fused_kernels import apply_twins

        decisions += apply_twins(result.model, loaded.family)
    return PlannedModel(model=result.model, family=loaded.family, hf_config=loaded.config,
                        processor=resolved.need_processor(), param_groups=result.param_groups,
                        adapter_table=result.table, quantized_layers=nq, decisions=decisions)


def materialize_fake(model, mode, param_groups: list) -> list:
    """Replace every meta parameter/buffer by a fake tensor of the same shape/dtype (shared ones once).

    Returns `param_groups` rewritten to the new parameter objects (groups are selected by identity).
    """
    import torch
    from torch import nn

    new_of: dict[int, Any] = {}

    def fake_like(t):
        if mode.is_our_fake(t):
            return t
        if t.device.type != "meta":
            # a real buffer: integer ones stay real (index values), floating ones become fake
            return t if not t.is_floating_point() else mode.with_value(t)
        with mode:
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")

    for mod in model.modules():
        # Module.__setattr__ on a registered name replaces the parameter / buffer in place (keeping a
        # buffer's persistence); remove_duplicate=False visits every name of a shared (tied) tensor.
        for name, p in list(mod.named_parameters(recurse=False, remove_duplicate=False)):
            if id(p) not in new_of:
                new_of[id(p)] = nn.Parameter(fake_like(p.data), requires_grad=p.requires_grad)
            setattr(mod, name, new_of[id(p)])
        for name, b in list(mod.named_buffers(recurse=False, remove_duplicate=False)):
            if id(b) not in new_of:
                new_of[id(b)] = fake_like(b)
            setattr(mod, name, new_of[id(b)])
    groups = []
    for g in param_groups:
        groups.append(dict(g, params=[new_of[id(p)] for p in g["params"]]))
    return groups
