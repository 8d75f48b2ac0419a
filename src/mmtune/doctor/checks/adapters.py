"""Adapter and gradient checks (failure modes 10-13): what is trainable per component, whether every
trainable parameter gets a gradient, selection by identity, and parameters that only some modalities reach."""

from __future__ import annotations

from ...compat.transformers_internals import checkpointing_function
from ..findings import error, info, warning
from ..registry import check

_MEANT_FROZEN = ("vision", "audio", "projector")


def trainable_by_component(model, family) -> dict[str, int]:
    from ...adapters import component_of, n_params

    out: dict[str, int] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            comp = component_of(family, name)
            out[comp] = out.get(comp, 0) + n_params(p)
    return out


def lora_components(model, family) -> dict[str, int]:
    """LoRA weights per component of the layer they adapt."""
    from ...adapters import base_name, is_lora_param

    out: dict[str, int] = {}
    for name, p in model.named_parameters():
        if is_lora_param(name):
            layer = base_name(name.split(".lora_")[0])
            comp = family.component_of(layer + ".")
            out[comp] = out.get(comp, 0) + p.numel()
    return out


# apply_adapters raises ConfigError for nothing trainable / targets matching nothing: those are
# reported under MM010 (claims=), not as a generic build error.
@check("MM010", "something is trainable, LoRA targets exist, frozen-by-intent components stay frozen",
       needs=("cfg",), failure_mode=10, claims=("adapted:ConfigError",))
def trainable_parts(ctx):
    cfg = ctx.need("cfg")
    adapted = ctx.need("adapted")
    model, family = adapted.result.model, adapted.loaded.family
    by_comp = trainable_by_component(model, family)
    total = sum(by_comp.values())
    if total == 0:
        yield error("no parameter is trainable", where="adapter", fix="adapter.target_modules=auto")
        return
    summary = ", ".join(f"{c} {n:,}" for c, n in sorted(by_comp.items()))
    yield info(f"trainable parameters: {total:,} ({summary})", where="adapter")
    from ...resolve.decisions import trained_set

    # The resolved trainable set: adapter.train_components and every component a stage of train.stages
    # trains (the model is built with every stage's parameters trainable; each step updates its stage's).
    trained = trained_set(cfg.adapter, family, cfg.train.stages)
    intended = set(cfg.adapter.train_components) | {c for c, how in trained.items() if "train.stages" in how}
    lora = lora_components(model, family)
    for comp in _MEANT_FROZEN:
        if comp in trained and "train.stages" in trained[comp] and by_comp.get(comp):
            yield info(f"component {comp} ({by_comp[comp]:,} parameters) is trained by {trained[comp]}",
                       where="train.stages")
        if comp in intended or comp not in family.components:
            continue
        if cfg.adapter.method == "full" and comp not in cfg.adapter.freeze_components:
            continue  # full fine-tuning trains everything unless frozen explicitly
        if lora.get(comp) and targets_on(cfg.adapter.target_modules, comp):
            yield info(f"LoRA on the {comp} component ({lora[comp]:,} LoRA parameters), as adapter.target_modules "
                       "names it", where="adapter.target_modules")
        elif lora.get(comp):
            yield warning(f"LoRA reaches the {comp} component ({lora[comp]:,} LoRA parameters) although it is "
                          "not in adapter.train_components (target_modules too broad?)",
                          where="adapter.target_modules", fix="adapter.target_modules=auto (decoder only)")
        elif by_comp.get(comp) and _nested_in_trained(family, comp, intended):
            # Qwen2-VL's merger lives inside `model.visual`: training the vision module in full trains it too.
            yield info(f"component {comp} ({by_comp[comp]:,} parameters) is trained because it is nested in a "
                       f"component in adapter.train_components ({', '.join(sorted(intended))})",
                       where="adapter.train_components")
        elif by_comp.get(comp):
            yield warning(f"component {comp} has {by_comp[comp]:,} trainable parameters but is not in "
                          "adapter.train_components", where="adapter.freeze_components",
                          fix=f"adapter.freeze_components=[{comp}]")


def targets_on(targets, comp: str) -> list[str]:
    """The adapter.target_modules entries that put LoRA on `comp` on purpose: `comp:name` / `comp[-k:]:name`."""
    import re

    return [t for t in targets if re.match(rf"{comp}(\[-\d+:\])?:", t)] if isinstance(targets, list) else []


def _nested_in_trained(family, comp: str, intended: set) -> bool:
    """Whether `comp`'s modules sit inside a component trained in full (so it is trained with it)."""
    return any(p.startswith(q) for p in family.components.get(comp, ()) for c in intended
               for q in family.components.get(c, ()) if c != comp)


@check("MM012", "optimizer groups hold exactly the trainable parameters (selected by identity)",
       needs=("cfg", "adapted"), failure_mode=12)
def selection_by_identity(ctx):
    res = ctx.need("adapted").result
    yield from identity_findings(res.model, res.param_groups)


def identity_findings(model, param_groups):
    grouped = {id(p) for g in param_groups for p in g["params"]}
    names = {id(p): n for n, p in model.named_parameters()}
    trainable = {id(p) for _, p in model.named_parameters() if p.requires_grad}
    missing = [names[i] for i in trainable - grouped]
    frozen = [names[i] for i in grouped - trainable if i in names]
    strangers = len(grouped - set(names))
    if missing:
        yield error(f"{len(missing)} trainable parameter(s) are in no optimizer group and would never update: "
                    f"{', '.join(missing[:5])}", where=missing[0],
                    fix="select parameters by identity before wrapping (mmtune.adapters does); do not re-select "
                        "by name after DDP/peft wrapping ('module.' prefixes)")
    if frozen:
        yield warning(f"{len(frozen)} frozen parameter(s) are in optimizer groups: {', '.join(frozen[:5])}",
                      where=frozen[0], fix="build optimizer groups from parameters with requires_grad")
    if strangers:
        yield error(f"{strangers} optimizer parameter(s) are not parameters of the model being trained "
                    "(selected from another copy of the model?)", where="optimizer",
                    fix="build the optimizer from the model object that is trained, after adapters")


def _record_signatures(ctx, family) -> list[str]:
    """Kinds of batches the data holds, from the scan when it ran; else text + each modality."""
    scan = ctx._cache.get("scan")
    if scan is not None:
        sigs = set()
        for s in scan.splits:
            sigs.update(s.signatures)
        if sigs:
            return sorted(sigs)
    return ["text"] + [m for m in family.modalities if m != "text"]


@check("MM011", "one backward reaches every trainable parameter", needs=("cfg", "grad_model"), failure_mode=11)
def gradients_reach(ctx):
    """A trainable parameter no batch reaches is an error only when the model's own forward would reach
    it with one of the data's batch kinds (the run's setup cuts the graph: reentrant checkpointing,
    frozen inputs). Unused by design (LLaVA's last vision layer) or reached only by a modality the data
    lacks (full fine-tuning of a VLM on text): it stays as loaded; AdamW skips it and DDP's
    find_unused_parameters covers it (build.ddp_unused_components): an info."""
    from ...adapters import component_of
    from ..gradflow import plain_name, plain_reach

    g = ctx.need("grad_model")
    sigs, reached = _grad_sources(ctx)
    dead = [n for n, srcs in reached.items() if not srcs]
    if not dead:
        return
    family = g.adapted.loaded.family
    plain = plain_reach(g.cfg.model.name, family)  # the twin the backward ran on (the proxy, if one)
    unused, elsewhere, cut = classify_dead(dead, {n: plain.get(plain_name(n), {"text"}) for n in dead}, sigs)
    lora_unused = [n for n in unused if "lora_" in n]
    if lora_unused:
        yield warning(f"{len(lora_unused)} LoRA parameter(s) sit on layers the model's forward never uses, so they "
                      f"never train: {', '.join(lora_unused[:3])}", where=g.where(lora_unused[0]),
                      fix="adapter.target_modules=auto (or target layers the model uses)")
    plain_unused = [n for n in unused if "lora_" not in n]
    if plain_unused:
        yield info(f"{len(plain_unused)} trainable parameter(s) are unused by the model's own forward (e.g. "
                   f"{plain_unused[0]}; LLaVA-style models read an earlier vision layer): they keep their "
                   "loaded values, which is harmless", where=g.where(plain_unused[0]))
    if elsewhere:
        comps = sorted({component_of(family, n) for n in elsewhere} - {"lora"})
        yield info(f"{len(elsewhere)} trainable parameter(s) ({', '.join(comps)}) get gradients only from media "
                   f"the data does not hold (batch kinds: {sorted(sigs)}): they keep their loaded values",
                   where=g.where(elsewhere[0]),
                   fix=f"adapter.freeze_components=[{', '.join(comps)}] to save their gradient and optimizer memory"
                   if comps else None)
    yield from no_grad_findings({n: set() for n in cut}, g.where)


def _grad_sources(ctx):
    """(batch kinds, {param: kinds that reached it}), computed once for MM011 and MM013."""
    from ..gradflow import example_batches, grad_sources
    from ..pieces import real_dtype

    if "grad_sources" not in ctx._cache:
        g = ctx.need("grad_model")
        loaded = g.adapted.loaded
        batches = example_batches(loaded.processor, loaded.family, _record_signatures(ctx, loaded.family))
        _, reached = grad_sources(g.adapted.result.model, batches, real_dtype(g.resolved))
        ctx.put("grad_sources", (sorted(batches), reached))
    return ctx._cache["grad_sources"]


def classify_dead(dead: list[str], plain_kinds: dict[str, set], sigs) -> tuple[list, list, list]:
    """Parameters no batch reached -> (unused by the model's own forward, reached only by media kinds
    the data lacks, cut by the run's setup). `plain_kinds`: the batch kinds that reach each in the bare
    twin (a name the twin does not know counts as reached by text: an error, never hidden)."""
    data_kinds = {k for s in sigs for k in s.split("+")}
    unused, elsewhere, cut = [], [], []
    for n in dead:
        kinds = {k for s in plain_kinds[n] for k in s.split("+")}
        (unused if not kinds else elsewhere if not kinds & data_kinds else cut).append(n)
    return unused, elsewhere, cut


def no_grad_findings(reached: dict[str, set], where=lambda n: n):
    dead = [n for n, srcs in reached.items() if not srcs]
    if dead:
        yield error(f"{len(dead)} trainable parameter(s) get no gradient from any batch: {', '.join(dead[:5])}",
                    where=where(dead[0]),
                    fix="with gradient checkpointing and frozen embeddings the inputs need requires_grad "
                        "(enable_input_require_grads) and non-reentrant checkpointing; or freeze them")


@check("MM013", "DDP-safe gradients: no modality-dependent unused parameters the run does not handle, "
       "non-reentrant checkpointing",
       needs=("cfg", "grad_model"), failure_mode=13)
def modality_dependent(ctx):
    g = ctx.need("grad_model")
    sigs, reached = _grad_sources(ctx)
    yield from partial_grad_findings(sigs, reached, g.where, g.adapted.loaded.family)
    yield from reentrant_findings(g.adapted.result.model)


def partial_grad_findings(sigs, reached, where=lambda n: n, family=None):
    """Parameters only some batch kinds reach break DDP without find_unused_parameters; the run sets
    it for the components build.ddp_unused_components names (their LoRA weights too), so those are only
    an info. What is left (a decoder parameter only some batches reach) stays a warning."""
    from ...adapters import host_component_of
    from ...build import DDP_MAY_BE_UNUSED

    partial = {n: s for n, s in reached.items() if s and len(s) < len(sigs)}
    if family is not None:
        handled = {n for n in partial if host_component_of(family, n) in DDP_MAY_BE_UNUSED}
        if handled:
            comps = sorted({host_component_of(family, n) for n in handled})
            yield info(f"{len(handled)} parameter(s) of {', '.join(comps)} (trained in full or through LoRA) get "
                       "gradients only from some batch kinds; the run sets DDP find_unused_parameters=True for them",
                       where=where(next(iter(handled))))
        partial = {n: s for n, s in partial.items() if n not in handled}
    if partial:
        name, srcs = next(iter(partial.items()))
        missing = sorted(set(sigs) - srcs)
        yield warning(f"{len(partial)} trainable parameter(s) get gradients only from some batch kinds (e.g. "
                      f"{name}: only from {sorted(srcs)}, not {missing}); under DDP a rank with such a batch "
                      "fails with 'Expected to mark a variable ready only once' / unused parameters",
                      where=where(name),
                      fix="keep the component frozen (adapter.train_components=[]) or its layers out of "
                          "adapter.target_modules, or keep one modality per dataset")


def reentrant_findings(model):
    for name, m in model.named_modules():
        fn = checkpointing_function(m)
        if fn is None or not getattr(m, "gradient_checkpointing", False):
            continue
        if getattr(fn, "keywords", {}).get("use_reentrant", True):
            yield warning("gradient checkpointing is reentrant: with LoRA and DDP it marks parameters ready "
                          "twice and frozen inputs block gradients", where=name or "model",
                          fix="enable it with gradient_checkpointing_kwargs={'use_reentrant': False} "
                              "(mmtune.models.checkpointing.enable_checkpointing)")
            return
