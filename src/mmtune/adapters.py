"""Adapters: LoRA / DoRA / QLoRA / 8-bit LoRA on the decoder, components trained in full or frozen, per-component LR.

`apply_adapters(model, family, adapter_cfg, train_cfg)` returns the (possibly peft-wrapped) model,
optimizer parameter groups and a table of trainable parameters per component.

Rules (failure modes 10-12):
- LoRA goes on the decoder's linear layers only. `adapter.target_modules` may be "auto" (the
  standard attention + MLP projections), "all-linear" (every nn.Linear of the decoder), or a list of
  names. A plain name ("q_proj") is matched inside the decoder only; reaching another component needs
  an explicit "component:name" ("vision:qkv"; "vision[-2:]:q_proj" for the last 2 blocks only) or a
  dotted module path ("model.visual.blocks.0.attn.qkv"), matched as peft matches it (the name or a
  dotted suffix of it), also in transformers 4.x's layout ("language_model.model.layers.0...").
  A single string other than auto/all-linear is a regex over full module names, as in peft
  (HF's LLaVA example: `.*language_model.*\\.(q_proj|v_proj)`).
- Components in `adapter.train_components` are trained in full through peft `modules_to_save`, so
  `save_pretrained` / `PeftModel.from_pretrained` carry them with the adapter.
- Parameter groups are built here, from parameter objects, before any DDP wrapping; the trainer hands
  them to the optimizer as they are (never re-selects by name after wrapping).
- Nothing trainable, or targets matching nothing, is an error listing what exists; a component the
  user meant frozen that ends up trainable is a warning.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from .config.schema import COMPONENTS
from .errors import ConfigError
from .models.families import Family

log = logging.getLogger("mmtune.adapters")

# How peft decorates the names of the base model's parameters.
_PEFT_PREFIX = "base_model.model."
_PEFT_INFIX = re.compile(r"\.modules_to_save\.[^.]+(?=\.)|\.original_module(?=\.)|\.base_layer(?=\.)")
_LORA = re.compile(r"\.lora_(?:A|B|embedding_A|embedding_B|magnitude_vector)\b")


@dataclass
class ComponentRow:
    component: str
    total: int
    trainable: int


@dataclass
class TrainableTable:
    rows: list[ComponentRow]
    lora_params: int
    lora_by_component: dict[str, int] = field(default_factory=dict)
    method: str = "lora"

    @property
    def total(self) -> int:
        return sum(r.total for r in self.rows) + self.lora_params

    @property
    def trainable(self) -> int:
        return sum(r.trainable for r in self.rows) + self.lora_params

    def trainable_of(self, component: str) -> int:
        if component == "lora":
            return self.lora_params
        return next((r.trainable for r in self.rows if r.component == component), 0)

    def render(self):
        """A rich Table: per component, parameters, trainable and percentage."""
        from rich.table import Table

        t = Table(title=f"trainable parameters ({self.method})")
        for col in ("component", "parameters", "trainable", "% of component", "% of all trainable"):
            t.add_column(col, justify="left" if col == "component" else "right")
        tot_tr = max(self.trainable, 1)
        for r in self.rows:
            t.add_row(r.component, f"{r.total:,}", f"{r.trainable:,}",
                      f"{100 * r.trainable / max(r.total, 1):.2f}", f"{100 * r.trainable / tot_tr:.2f}")
        if self.lora_params:
            where = ", ".join(f"{c} {n:,}" for c, n in self.lora_by_component.items())
            t.add_row(f"lora ({where})", f"{self.lora_params:,}", f"{self.lora_params:,}", "100.00",
                      f"{100 * self.lora_params / tot_tr:.2f}")
        t.add_row("total", f"{self.total:,}", f"{self.trainable:,}",
                  f"{100 * self.trainable / max(self.total, 1):.3f}", "100.00")
        return t

    def __str__(self) -> str:
        from rich.console import Console

        c = Console(width=120, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - render only
        c.print(self.render())
        return c.export_text()


@dataclass
class AdapterResult:
    model: Any
    param_groups: list[dict]  # torch optimizer groups: params, lr, weight_decay, component
    table: TrainableTable
    warnings: list[str] = field(default_factory=list)
    lora_targets: list[str] = field(default_factory=list)  # module names that got LoRA


def base_name(name: str) -> str:
    """The unwrapped model's parameter name for a name of a peft-wrapped model."""
    if name.startswith(_PEFT_PREFIX):
        name = name[len(_PEFT_PREFIX):]
    return _PEFT_INFIX.sub("", name)


def is_lora_param(name: str) -> bool:
    return bool(_LORA.search(name))


def component_of(family: Family, name: str) -> str:
    """Component of a (possibly peft-decorated) parameter name; LoRA weights count as 'lora'."""
    if is_lora_param(name):
        return "lora"
    return family.component_of(base_name(name))


def host_component_of(family: Family, name: str) -> str:
    """The component a parameter lives in, a LoRA weight counted in the component of the layer it adapts
    (`visual.blocks.0.attn.qkv.lora_A.default.weight` -> vision): what decides which batches reach it."""
    if is_lora_param(name):
        return family.component_of(base_name(_LORA.split(name)[0]) + ".")
    return family.component_of(base_name(name))


def _linear_modules(model) -> list[str]:
    from torch import nn

    try:
        import bitsandbytes as bnb

        kinds: tuple = (nn.Linear, bnb.nn.Linear4bit, bnb.nn.Linear8bitLt)
    except ImportError:
        kinds = (nn.Linear,)
    return [n for n, m in model.named_modules() if isinstance(m, kinds)]


def n_params(p) -> int:
    """Logical parameter count; a packed 4-bit weight holds two values per stored byte."""
    qs = getattr(p, "quant_state", None)
    if qs is not None and getattr(qs, "shape", None) is not None:
        import math

        return math.prod(qs.shape)
    return p.numel()


def _in_component(family: Family, module_name: str, component: str) -> bool:
    return family.component_of(module_name + ".") == component


# transformers 5 (from 4.52) nests the LLaVA-style language model and vision tower under `model.`;
# module paths copied from older configs and tutorials use the 4.x layout. The same rewrite as
# transformers' own checkpoint conversion for these families, applied only to a path that matches nothing.
_LEGACY_PREFIXES = (("language_model.model.", "model.language_model."), ("language_model.lm_head", "lm_head"),
                    ("vision_tower.", "model.vision_tower."), ("multi_modal_projector.", "model.multi_modal_projector."))


def _path_hits(linears: list[str], t: str) -> list[str]:
    """Modules a dotted path names: itself, a dotted suffix (peft's rule), or a prefix of a block."""
    def match(p):
        return [n for n in linears if n == p or n.endswith("." + p) or n.startswith(p + ".") or f".{p}." in n]

    hits = match(t)
    for old, new in _LEGACY_PREFIXES:
        if not hits and t.startswith(old):
            hits = match(new + t[len(old):])
    return hits


def lora_target_names(model, family: Family, target_modules) -> list[str]:
    """Full names of the linear modules that get LoRA (decoder only unless named explicitly)."""
    linears = _linear_modules(model)
    decoder = [n for n in linears if _in_component(family, n, "decoder")]
    if isinstance(target_modules, str) and target_modules not in ("auto", "all-linear"):
        chosen = [n for n in linears if re.fullmatch(target_modules, n)]  # peft's rule for a string
        if chosen:
            return chosen
        if not re.search(r"[*+?()|\\^$]", target_modules):  # a lone name ("q_proj"): as a one-item list
            return lora_target_names(model, family, [target_modules])
        raise ConfigError(f"adapter.target_modules regex {target_modules!r} matches no linear layer",
                          where="adapter.target_modules",
                          fix=f"module names look like {decoder[0] if decoder else linears[0]}; use 'auto', "
                              "a list of names, or a regex over full module names")
    if target_modules in ("auto", "all-linear"):
        if target_modules == "auto":
            chosen = [n for n in decoder if n.rsplit(".", 1)[-1] in family.lora_targets]
            if chosen:
                return chosen
        return decoder  # all-linear, or auto on a decoder without the usual names
    chosen: list[str] = []
    unmatched: list[str] = []
    for t in target_modules:
        if ":" in t:  # component:leaf, e.g. vision:qkv; vision[-2:]:q_proj = its last 2 blocks only
            comp, leaf = t.rsplit(":", 1)
            m = re.fullmatch(r"(\w+)\[-(\d+):\]", comp)
            comp, last = (m.group(1), int(m.group(2))) if m else (comp, None)
            if comp not in COMPONENTS:
                raise ConfigError(f"adapter.target_modules: unknown component {comp!r} in {t!r}",
                                  where="adapter.target_modules", fix=f"one of {', '.join(COMPONENTS)}")
            hits = [n for n in linears if _in_component(family, n, comp) and n.rsplit(".", 1)[-1] == leaf]
            if last is not None:
                hits = _last_blocks(hits, last)
        elif "." in t:  # an explicit module path (or path prefix)
            hits = _path_hits(linears, t)
        else:
            hits = [n for n in decoder if n.rsplit(".", 1)[-1] == t]
        if not hits:
            unmatched.append(t)
        chosen += [h for h in hits if h not in chosen]
    if unmatched:
        leaves = sorted({n.rsplit(".", 1)[-1] for n in decoder})
        raise ConfigError(
            f"adapter.target_modules {unmatched} match no linear layer of the decoder",
            where="adapter.target_modules",
            fix=f"decoder linear layers are named: {', '.join(leaves)}; use 'auto', 'all-linear', "
                "'component:name' (e.g. vision:qkv) or a full module path" + _not_linear_hint(model, family, unmatched))
    return chosen


def _not_linear_hint(model, family: Family, unmatched: list[str]) -> str:
    """Why a mixture of experts' names match nothing: transformers 5 keeps each layer's experts as fused 3-D
    parameters (Mixtral's `w1` / `w2` / `w3` and Qwen-MoE's per-expert `gate_proj` / `up_proj` / `down_proj` of
    transformers 4 are gone) and its router `gate` as a module of its own (`F.linear` on a weight), neither
    nn.Linear: LoRA lands on neither, whatever the name (recipes written for transformers 4 list them)."""
    import re

    routers = sorted({type(m).__name__ for n, m in model.named_modules()
                      if n.rpartition(".")[2] in unmatched and _in_component(family, n, "decoder")})
    fused = []
    for n, p in model.named_parameters():
        path = re.sub(r"\.\d+\.", ".*.", n)
        if p.dim() >= 3 and _in_component(family, n, "decoder") and path not in fused:
            fused.append(path)
    hint = ""
    if routers:
        hint += f"; {', '.join(routers)} (named {', '.join(unmatched)}) is not nn.Linear"
    if fused:
        hint += (f"; this mixture of experts keeps its experts as fused 3-D parameters ({', '.join(fused)}), not "
                 "nn.Linear: LoRA cannot land on them (nor on the router), adapter.method=full trains them")
    return hint


def _last_blocks(names: list[str], k: int) -> list[str]:
    """The names inside the last k numbered blocks (`...layers.25.self_attn.q_proj`): block counts
    differ between a full-size model and its tiny twin, so recipes name blocks from the end."""
    def block(n: str) -> int | None:
        m = re.search(r"\.(?:layers|blocks|layer|h)\.(\d+)\.", n)
        return int(m.group(1)) if m else None

    blocks = sorted({b for n in names if (b := block(n)) is not None})
    keep = set(blocks[-k:]) if k else set()
    return [n for n in names if block(n) in keep]


def _component_module_names(model, family: Family, component: str) -> list[str]:
    """Top-level module names of a component (for peft modules_to_save)."""
    prefixes = [p.rstrip(".") for p in family.components.get(component, ())]
    names = dict(model.named_modules())
    from torch import nn

    out = []
    for p in prefixes:
        if p not in names:
            continue
        if isinstance(names[p], (nn.ModuleList, nn.ModuleDict)):
            # peft wraps real modules only: a container (Qwen3-VL's DeepStack mergers) by its children
            out += [f"{p}.{child}" for child, _ in names[p].named_children()]
        else:
            out.append(p)
    return out


def _bare_parameters(model, family: Family, components: list[str], to_save: list[str]) -> list[str]:
    """Parameters of the trained components that sit on no module peft's modules_to_save can copy: LLaVA-NeXT's
    and OneVision's `image_newline` is an nn.Parameter of the model itself, so listing the projector there left it
    frozen (a composed model kept its random separator). These are made trainable by name; the checkpoint's
    trainable.safetensors carries them and export --merge writes them into the merged model."""
    inside = tuple(m + "." for m in to_save)
    return [n for n, _ in model.named_parameters()
            if family.component_of(n) in components and not n.startswith(inside)]


def apply_adapters(model, family: Family, adapter_cfg, train_cfg=None) -> AdapterResult:
    """Apply the adapter config to `model` (see module docstring)."""
    if train_cfg is None:
        from .config.schema import TrainConfig

        train_cfg = TrainConfig()
    method = adapter_cfg.method
    train_c, freeze_c = list(adapter_cfg.train_components), list(adapter_cfg.freeze_components)
    both = sorted(set(train_c) & set(freeze_c))
    if both:
        raise ConfigError(f"component(s) {both} are both in adapter.train_components and adapter.freeze_components",
                          where="adapter", fix="keep each component in one of the two lists")
    present = {family.component_of(n) for n, _ in model.named_parameters()}
    for c in train_c + freeze_c + [c for c in adapter_cfg.lr_multipliers if c != "lora"]:
        if c not in present:
            raise ConfigError(f"component {c!r} does not exist in this {family.name} model",
                              where="adapter", fix=f"components of this model: {', '.join(sorted(present - {'other'}))}")

    warnings: list[str] = []
    targets: list[str] = []
    if method == "full":
        for n, p in model.named_parameters():
            p.requires_grad_(family.component_of(n) not in freeze_c)
        if adapter_cfg.train_components:
            log.info("method=full trains every component not frozen; train_components is implied")
    else:
        from peft import LoraConfig, get_peft_model

        for p in model.parameters():
            p.requires_grad_(False)
        targets = lora_target_names(model, family, adapter_cfg.target_modules)
        to_save = [m for c in train_c for m in _component_module_names(model, family, c)]
        lcfg = LoraConfig(
            r=adapter_cfg.r, lora_alpha=adapter_cfg.lora_alpha, lora_dropout=adapter_cfg.dropout,
            use_dora=adapter_cfg.use_dora, bias="none",
            # exact module names, as a list: nothing outside them can be reached by accident. Not a regex: peft 0.21
            # resolves a regex on transformers 5's MoE models (Qwen3-Omni) to bare leaf names ({"q_proj", ...};
            # peft/utils/transformers_weight_conversion.py `_resolve_string_target_modules`), which then also match
            # the audio encoder's q/k/v_proj. A list of full names passes through that conversion unchanged.
            target_modules=list(targets),
            modules_to_save=to_save or None,
        )
        bare = _bare_parameters(model, family, train_c, to_save)
        model = get_peft_model(model, lcfg)
        wrapped = dict(model.named_parameters())
        for n in bare:  # after peft froze the base: these are trained in full beside modules_to_save
            wrapped[f"base_model.model.{n}"].requires_grad_(True)
        from .models.checkpointing import text_input_grads_only

        # peft re-hooks every sub-model's input embeddings; only the text embeddings' (models/checkpointing.py)
        text_input_grads_only(model)
        # lm_head/embeddings in train_components that peft could not wrap: none expected, checked below.

    # Build groups and the table from the model as it is now (peft-wrapped, not yet DDP-wrapped).
    totals = {c: 0 for c in COMPONENTS}
    trainable = {c: 0 for c in COMPONENTS}
    lora_by: dict[str, int] = {}
    lora_n = 0
    groups: dict[tuple[str, bool], list] = {}
    seen: set[int] = set()
    for n, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        comp = component_of(family, n)
        if comp == "lora":
            host = host_component_of(family, n)
            lora_by[host] = lora_by.get(host, 0) + n_params(p)
            lora_n += n_params(p)
        else:
            # peft keeps the original of a modules_to_save module beside the trained copy: count once.
            if ".original_module." in n:
                continue
            totals.setdefault(comp, 0)
            trainable.setdefault(comp, 0)
            totals[comp] += n_params(p)
            if p.requires_grad:
                trainable[comp] += n_params(p)
        if p.requires_grad:
            decay = p.ndim >= 2  # no weight decay on biases and norms
            groups.setdefault((comp, decay), []).append(p)

    if not groups:
        raise ConfigError("no parameter is trainable", where="adapter",
                          fix="use adapter.method lora/qlora/lora8bit (LoRA on the decoder) or full, or list components "
                              "in adapter.train_components")
    for c in COMPONENTS:
        intended = (method == "full" and c not in freeze_c) or c in train_c or (c == "decoder" and method == "full")
        if trainable.get(c, 0) and not intended:
            warnings.append(f"component {c!r} is meant frozen but has {trainable[c]:,} trainable parameters")
        if lora_by.get(c) and c in freeze_c:
            warnings.append(f"component {c!r} is in adapter.freeze_components but has LoRA weights "
                            f"({lora_by[c]:,} parameters) from adapter.target_modules")
    for w in warnings:
        log.warning(w)

    param_groups = []
    for (comp, decay), params in sorted(groups.items()):
        mult = adapter_cfg.lr_multipliers.get(comp, 1.0)
        param_groups.append({"params": params, "lr": train_cfg.lr * mult,
                             "weight_decay": train_cfg.weight_decay if decay else 0.0,
                             "component": comp})
    rows = [ComponentRow(c, totals[c], trainable[c]) for c in list(totals) if totals[c]]
    table = TrainableTable(rows=rows, lora_params=lora_n, lora_by_component=lora_by, method=method)
    return AdapterResult(model=model, param_groups=param_groups, table=table, warnings=warnings,
                         lora_targets=targets)
