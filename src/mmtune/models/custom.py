"""Bring your own model: a research model outside transformers' registry, by import path.

`model.class: pkg.module:MyLlava` and/or `model.factory: pkg.module:build` name it; the contract is in
docs/byo_model.md. This module turns that into a `Family` (the same table of components every other
part reads: adapters, stages, DDP, doctor, planner) when the run is resolved, and builds the model for
`build.load_model`. Every way the contract can be missed is a `ModelLoadError` naming what is missing
and where: not importable, no components declared, a component the config names that the model lacks,
a prefix that matches no parameter, a forward that takes no `labels` (model.loss=output), no loss in
the output, no `generate` while evaluation generates.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from ..config.schema import COMPONENTS
from ..errors import ModelLoadError
from .families import Family

DOC = "docs/byo_model.md"


def is_custom(cfg) -> bool:
    return bool(cfg.model.class_ or cfg.model.factory)


def import_object(path: str, key: str) -> Any:
    """`pkg.module:Name` (or `pkg.module.Name`) imported; a ModelLoadError naming `key` otherwise."""
    mod_name, sep, attr = path.partition(":")
    if not sep:
        mod_name, _, attr = path.rpartition(".")
    if not mod_name or not attr:
        raise ModelLoadError(f"{key}={path!r} is not an import path", where=key,
                             fix="write it as package.module:Name (the module importable from this Python)")
    try:
        module = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - any import-time failure of the user's module is reported as such
        raise ModelLoadError(f"{key}={path!r}: cannot import module {mod_name!r} ({type(e).__name__}: {e})",
                             where=key, fix="install the package, or add its folder to PYTHONPATH; check the "
                                            "module imports on its own: python -c 'import " + mod_name + "'") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = sorted(n for n in dir(module) if not n.startswith("_"))[:20]
            raise ModelLoadError(f"{key}={path!r}: module {mod_name!r} has no {attr!r}", where=key,
                                 fix=f"one of the names it defines: {', '.join(names) or 'none'}")
        obj = getattr(obj, part)
    return obj


def custom_family(cfg) -> Family:
    """The Family of a model brought by model.class / model.factory (resolved once, in the resolved run)."""
    cls = import_object(cfg.model.class_, "model.class") if cfg.model.class_ else None
    factory = import_object(cfg.model.factory, "model.factory") if cfg.model.factory else None
    if cls is not None and not inspect.isclass(cls):
        raise ModelLoadError(f"model.class={cfg.model.class_!r} is a {type(cls).__name__}, not a class", where="model.class",
                             fix="point model.class at the model's class, or a function at model.factory")
    if factory is not None and not callable(factory):
        raise ModelLoadError(f"model.factory={cfg.model.factory!r} is not callable", where="model.factory",
                             fix="point it at a function build(name, *, dtype) -> model")
    if cls is not None:
        check_forward(cls, cfg, f"{cls.__name__}.forward")
    holder = cls if cls is not None else factory
    label = cfg.model.class_ or cfg.model.factory
    if cfg.model.components:
        comps, how = cfg.model.components, "model.components"
    else:
        comps, how = getattr(holder, "mmtune_components", None), f"{getattr(holder, '__name__', label)}.mmtune_components"
    if not comps:
        raise ModelLoadError(f"{label} declares no components (vision / projector / decoder / lm_head)",
                             where="model.components",
                             fix="give the class (or factory) a `mmtune_components = {'vision': ('vision_tower.',), "
                                 "'projector': ('projector.',), 'decoder': ('language_model.',)}` attribute, or set "
                                 f"model.components in the config ({DOC})")
    unknown = sorted(set(comps) - set(COMPONENTS))
    if unknown:
        raise ModelLoadError(f"{how} names unknown component(s) {unknown}", where=how, fix=f"use {', '.join(COMPONENTS)}")
    if "decoder" not in comps:
        raise ModelLoadError(f"{how} has no 'decoder' (the language model LoRA goes on)", where=how,
                             fix="add 'decoder': ('<prefix of the language model's parameters>.',)")
    components = {c: tuple(comps[c]) if not isinstance(comps[c], str) else (comps[c],) for c in COMPONENTS if c in comps}
    _check_named_components(cfg, components, label)
    modalities = tuple(getattr(holder, "mmtune_modalities", None) or ("text", "image"))
    return Family(name=f"custom:{label}", model_types=(), model_class=cfg.model.class_ or "", modalities=modalities,
                  components=components, factory=cfg.model.factory)


def _check_named_components(cfg, components: dict, label: str) -> None:
    """Every component the config names exists in the model: "no component named X" before any build."""
    import re

    named = [(c, "adapter.train_components") for c in cfg.adapter.train_components]
    named += [(c, "adapter.freeze_components") for c in cfg.adapter.freeze_components]
    named += [(c, "adapter.lr_multipliers") for c in cfg.adapter.lr_multipliers if c != "lora"]
    targets = cfg.adapter.target_modules if isinstance(cfg.adapter.target_modules, list) else []
    for t in targets:
        m = re.match(r"^([a-z_]+)(\[[^\]]*\])?:", t)
        if m:
            named.append((m.group(1), "adapter.target_modules"))
    for i, st in enumerate(cfg.train.stages):
        for unit in st.train:
            comp = re.sub(r"(_lora|_last_\d+)$", "", unit)
            if comp != "lora":
                named.append((comp, f"train.stages[{i}]"))
    for comp, key in named:
        if comp not in components:
            raise ModelLoadError(f"{label} has no component named {comp!r} (it declares: {', '.join(components)})",
                                 where=key, fix=f"name one of {', '.join(components)}, or declare {comp!r} in "
                                                f"mmtune_components / model.components ({DOC})")


def _accepts(fn, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True  # a builtin or C callable: cannot tell, let the call say
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def check_forward(obj, cfg, label: str) -> None:
    """The forward takes what mmtune passes: input_ids, attention_mask, use_cache, and labels under
    model.loss=output."""
    fwd = getattr(obj, "forward", None)
    if fwd is None:
        raise ModelLoadError(f"{label} does not exist: the model has no forward", where="model.class",
                             fix=f"a torch.nn.Module subclass with forward(input_ids, attention_mask, ...) ({DOC})")
    need = ["input_ids", "attention_mask", "use_cache"] + (["labels"] if cfg.model.loss == "output" else [])
    missing = [n for n in need if not _accepts(fwd, n)]
    if missing:
        why = " (model.loss=output calls forward(..., labels=labels))" if "labels" in missing else ""
        raise ModelLoadError(f"{label} takes no {', '.join(repr(m) for m in missing)}{why}", where="model.class",
                             fix="add the argument(s) (or **kwargs) to forward" + (
                                 ", or model.loss=logits to have mmtune compute the loss from the logits"
                                 if "labels" in missing else "") + f" ({DOC})")


def build_custom(cfg, family: Family, dtype, *, meta: bool):
    """The model, built by the factory (called with model.name and dtype) or the class's from_pretrained
    (model.name a folder). Under `meta` it is built inside accelerate's init_empty_weights: parameters on
    meta, never allocated (plan, doctor on full size)."""
    from contextlib import nullcontext

    import torch

    ctx = nullcontext()
    if meta:
        from accelerate import init_empty_weights

        ctx = init_empty_weights(include_buffers=False)
    label = cfg.model.factory or cfg.model.class_
    with ctx:
        if cfg.model.factory:
            factory = import_object(cfg.model.factory, "model.factory")
            model = factory(cfg.model.name, dtype=dtype)
        else:
            cls = import_object(cfg.model.class_, "model.class")
            if not hasattr(cls, "from_pretrained"):
                raise ModelLoadError(f"{cls.__name__} has no from_pretrained and no model.factory is given",
                                     where="model.factory", fix=f"model.factory=pkg.module:build, a function "
                                                                f"build(name, *, dtype) -> {cls.__name__} ({DOC})")
            try:
                model = cls.from_pretrained(cfg.model.name, dtype=dtype)
            except OSError as e:
                raise ModelLoadError(f"{cls.__name__}.from_pretrained({cfg.model.name!r}) failed: {e}", where="model.name",
                                     fix="point model.name at the folder its save_pretrained wrote") from None
    if not isinstance(model, torch.nn.Module):
        raise ModelLoadError(f"{label} returned a {type(model).__name__}, not a torch.nn.Module", where="model.factory",
                             fix=f"return the model itself (its processor comes from model.processor) ({DOC})")
    if cfg.model.class_ and not isinstance(model, import_object(cfg.model.class_, "model.class")):
        raise ModelLoadError(f"model.factory returned a {type(model).__name__}, not the model.class {cfg.model.class_}",
                             where="model.factory", fix="return an instance of model.class, or drop model.class")
    check_forward(model, cfg, f"{type(model).__name__}.forward")
    check_components(model, family)
    if cfg.eval.generate and (cfg.eval.metrics or isinstance(cfg.data.eval, list)) and cfg.data.eval \
            and not callable(getattr(model, "generate", None)):
        raise ModelLoadError(f"{type(model).__name__} has no generate(), which evaluation's metrics need",
                             where="eval.generate", fix="give the model generate(input_ids, attention_mask, ..., "
                                                        f"max_new_tokens) ({DOC}), or eval.generate=false (eval_loss only)")
    # The resolved run's loss decision, carried by the model wherever it goes (mmtune.loss reads it).
    model.mmtune_loss = cfg.model.loss
    return model


def check_components(model, family: Family) -> None:
    """Each declared prefix matches at least one parameter: a typo is an error, not an empty component."""
    names = [n for n, _ in model.named_parameters()]
    for comp, prefixes in family.components.items():
        for prefix in prefixes:
            if not any(n.startswith(prefix) for n in names):
                tops = sorted({n.split(".")[0] + "." for n in names})
                raise ModelLoadError(f"component {comp!r}: prefix {prefix!r} matches no parameter of "
                                     f"{type(model).__name__}", where="model.components / mmtune_components",
                                     fix=f"its top-level parameter prefixes: {', '.join(tops[:12])}")


def load_custom_processor(cfg):
    """model.processor: a function's import path (called with model.name), or a folder / hub id
    (AutoProcessor); default model.name when that is a folder holding processor files."""
    from pathlib import Path

    spec = cfg.model.processor
    if spec and ":" in spec and not Path(spec).exists():
        make = import_object(spec, "model.processor")
        return make(cfg.model.name), f"{spec}({cfg.model.name!r})"
    src = spec or cfg.model.name
    folder = Path(src).expanduser()
    if not spec and not folder.is_dir():
        raise ModelLoadError(f"no processor for {cfg.model.class_ or cfg.model.factory}: model.name={cfg.model.name!r} "
                             "is not a folder with processor files", where="model.processor",
                             fix="model.processor=pkg.module:make_processor (called with model.name) or a processor "
                                 f"folder / hub id ({DOC})")
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(str(folder) if folder.is_dir() else src,
                                             trust_remote_code=cfg.model.trust_remote_code), f"processor of {src}"
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"cannot load the processor from {src}: {e}", where="model.processor",
                             fix=f"a folder saved with processor.save_pretrained, or pkg.module:make_processor ({DOC})") from None
