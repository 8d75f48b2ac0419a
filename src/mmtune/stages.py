"""Staged unfreezing (`train.stages`): which parameters each optimizer step updates, and at what LR.

Every parameter of every stage is made trainable once, when the model is built (before any wrapping;
fp32, in the optimizer's groups from the start, saved in every checkpoint). During a step only the
current stage's parameters require gradients: the others get none, so AdamW neither updates them nor
creates their state until their stage starts (an optimizer group "added" at the stage boundary), and
the backward skips what no active parameter needs. The stage is a function of the step alone, so a
resumed run is in the same stage with the same optimizer state as one that never stopped. Each stage's
`lr_multiplier` multiplies the scheduled LR (make_scheduler's `scale`). `mmtune plan` traces the
model with every stage's parameters trainable: at least the most expensive stage.

Units: a component (`projector`, `vision`, ...: its own weights in full), `COMPONENT_last_K` (the
weights of its last K numbered blocks), `COMPONENT_lora` (LoRA weights hosted in it), `lora` (all).
"""

from __future__ import annotations

import re
from contextlib import contextmanager

from .adapters import _last_blocks, base_name, component_of, is_lora_param
from .errors import ConfigError


def unit_component(unit: str) -> tuple[str, str]:
    """(component, how) a stage unit trains: `projector` -> (projector, in full), `vision_last_2` -> (vision,
    last 2 blocks), `decoder_lora` / `lora` -> (decoder / every LoRA host, LoRA)."""
    if unit == "lora":
        return "decoder", "LoRA"
    m = re.fullmatch(r"(\w+?)(_lora|_last_(\d+))?", unit)
    comp, kind, k = m.group(1), m.group(2), m.group(3)
    return comp, ("LoRA" if kind == "_lora" else f"last {k} blocks" if k else "in full")


def unit_matches(family, names: list[str], unit: str) -> list[str]:
    """The parameter names (of the adapted model) a unit selects."""
    if unit == "lora":
        return [n for n in names if is_lora_param(n)]
    m = re.fullmatch(r"(\w+?)(_lora|_last_(\d+))?", unit)
    comp, kind, k = m.group(1), m.group(2), m.group(3)
    if kind == "_lora":
        return [n for n in names if is_lora_param(n) and family.component_of(base_name(n.split(".lora_")[0]) + ".") == comp]
    hits = [n for n in names if not is_lora_param(n) and ".original_module." not in n
            and component_of(family, n) == comp]
    return _last_blocks(hits, int(k)) if k else hits


def stage_params(model, family, stages) -> list[list[str]]:
    """Per stage, the parameter names it trains; ConfigError for a unit that selects nothing."""
    names = [n for n, _ in model.named_parameters()]
    out = []
    for i, st in enumerate(stages):
        chosen: list[str] = []
        for unit in st.train:
            hits = unit_matches(family, names, unit)
            if not hits:
                raise ConfigError(f"stage {i} unit {unit!r} selects no parameter of this {family.name} model",
                                  where=f"train.stages[{i}].train",
                                  fix="LoRA units need adapter.method lora/qlora/lora8bit and target_modules reaching that "
                                      "component; components: " + ", ".join(sorted(family.components)))
            chosen += [n for n in hits if n not in chosen]
        out.append(chosen)
    return out


def make_trainable(model, family, stages, param_groups: list, train_cfg, lr_multipliers: dict) -> list:
    """Make every stage's parameters trainable; new optimizer groups for those the adapter froze."""
    if not stages:
        return param_groups
    params = dict(model.named_parameters())
    grouped = {id(p) for g in param_groups for p in g["params"]}
    new: dict[tuple[str, bool], list] = {}
    for names in stage_params(model, family, stages):
        for n in names:
            p = params[n]
            if id(p) in grouped:
                continue
            grouped.add(id(p))
            p.requires_grad_(True)
            comp = component_of(family, n)
            new.setdefault((comp, p.ndim >= 2), []).append(p)
    groups = list(param_groups)
    for (comp, decay), ps in sorted(new.items()):
        groups.append({"params": ps, "lr": train_cfg.lr * lr_multipliers.get(comp, 1.0),
                       "weight_decay": train_cfg.weight_decay if decay else 0.0, "component": comp})
    return groups


def stage_index(stages, step: int) -> int:
    """The stage of the optimizer step about to run (0-based `step`): stage i covers the steps before
    its `until` and from the previous stage's."""
    for i, st in enumerate(stages):
        if st.until is None or step < st.until:
            return i
    return len(stages) - 1


def lr_scale(stages):
    """`step -> the stage's lr_multiplier`, for the LR schedule (None without stages)."""
    if not stages:
        return None
    mults = [st.lr_multiplier for st in stages]
    return lambda step: mults[stage_index(stages, step)]


class StagedParams:
    """The run's stages resolved to parameters; `active(step)` sets requires_grad for one step."""

    def __init__(self, model, family, stages):
        self.stages = stages
        params = dict(model.named_parameters())
        self.per_stage = [[params[n] for n in names] for names in stage_params(model, family, stages)]
        self.all = list({id(p): p for ps in self.per_stage for p in ps}.values())

    @contextmanager
    def active(self, step: int):
        on = {id(p) for p in self.per_stage[stage_index(self.stages, step)]}
        for p in self.all:
            p.requires_grad_(id(p) in on)
        try:
            yield
        finally:  # between steps every stage's parameter is trainable: saved, counted, evaluated alike
            for p in self.all:
                p.requires_grad_(True)

    def inactive(self, step: int) -> list:
        """The staged parameters that do not learn at `step`. Under FSDP requires_grad cannot change after
        sharding (the gathered copies keep the flag they were made with), so there every staged
        parameter keeps requires_grad and these get their gradient dropped before the update instead:
        the same update (AdamW skips a parameter without a gradient), the gradient computed in vain."""
        on = {id(p) for p in self.per_stage[stage_index(self.stages, step)]}
        return [p for p in self.all if id(p) not in on]


def describe(stages) -> str:
    start, parts = 0, []
    for st in stages:
        span = (f"step {st.until}" if st.until == start + 1 else f"steps {start + 1}-{st.until}") if st.until \
            else f"steps {start + 1}-end"
        parts.append(f"{span}: {'+'.join(st.train)}" + (f" (lr x{st.lr_multiplier:g})" if st.lr_multiplier != 1 else ""))
        start = st.until or start
    return "; ".join(parts)
