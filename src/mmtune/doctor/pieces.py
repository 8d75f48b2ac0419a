"""Builders for the heavier context pieces: processor, model config, model (real for tiny twins, `meta` for
full-size models), model with adapters, and the planner's prediction. Each starts from the resolved
run and uses the builder training uses (build.build_model_and_adapters), so what doctor inspects is
what `mmtune train` would build."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .context import NotAvailable


@dataclass
class ProcessorInfo:
    processor: Any
    family: Any


def is_small(resolved) -> bool:
    """Tiny twins are built for real (a real backward runs in a second); other models on meta."""
    from ..models.tiny import is_tiny

    return is_tiny(resolved.cfg.model.name)


def real_dtype(resolved):
    """The dtype a real CPU build of the run uses: the resolved compute dtype, except fp16, a GPU path;
    the same parameters and graph in bf16 give the same gradient flow."""
    import torch

    d = resolved.compute_dtype
    return torch.bfloat16 if d == torch.float16 else d


def build_processor_info(resolved) -> ProcessorInfo:
    return ProcessorInfo(resolved.need_processor(), resolved.family)


def model_config(cfg):
    """The transformers config of the run's model without a download (None when none is on disk or
    embedded): tiny twin, a local folder's config.json (weights need not be there), cache, embedded."""
    from pathlib import Path

    from ..errors import ModelLoadError
    from ..models.model_config import meta_config
    from ..models.tiny import is_tiny

    name = cfg.model.name
    if is_tiny(name):
        from ..models.tiny import tiny_config_and_processor

        return tiny_config_and_processor(name)[0]
    folder = Path(name).expanduser()
    if (folder / "config.json").is_file():
        from transformers import AutoConfig

        from ..models.model_config import normalize_legacy_rope

        try:
            config = AutoConfig.from_pretrained(str(folder), trust_remote_code=cfg.model.trust_remote_code)
        except (OSError, ValueError, KeyError):
            return None  # an unknown model type: MM044 says why
        normalize_legacy_rope(config)
        return config
    try:
        return meta_config(cfg)
    except (ModelLoadError, OSError, ValueError, KeyError):
        return None


def buildable_here(resolved):
    """The run to build on this CPU: the same, except FlashAttention-2 planned for a GPU machine when flash_attn
    is not installed here (transformers refuses to build such a model, "FlashAttention2 has been toggled on,
    but it cannot be used"); SDPA stands in. The attention kernel changes no parameter, dtype, adapter
    placement or gradient path, which is what the model checks read; MM025 / MM050 check FA2 on the target."""
    import dataclasses
    import importlib.util

    if resolved.attn_implementation != "flash_attention_2" or importlib.util.find_spec("flash_attn") is not None:
        return resolved
    from ..models.construct import model_lacks_sdpa

    cfg, attn = resolved.cfg, "eager" if model_lacks_sdpa(resolved.family) else "sdpa"  # Gemma-2 has no SDPA
    model = cfg.model.model_copy(update={"attn_implementation": attn})
    return dataclasses.replace(resolved, attn_implementation=attn, cfg=cfg.model_copy(update={"model": model}))


def build_loaded(resolved):
    from ..build import load_model

    resolved = buildable_here(resolved)
    real = is_small(resolved)
    return load_model(resolved, device="cpu", dtype=real_dtype(resolved) if real else None, meta=not real)


@dataclass
class Adapted:
    loaded: Any
    result: Any  # AdapterResult
    real: bool


def build_adapted(resolved) -> Adapted:
    """A fresh model with adapters (peft wraps in place, so the `loaded` piece stays untouched)."""
    from ..build import build_model_and_adapters

    resolved = buildable_here(resolved)
    real = is_small(resolved)
    loaded, result = build_model_and_adapters(resolved, device="cpu", dtype=real_dtype(resolved) if real else None,
                                              meta=not real)
    return Adapted(loaded, result, real)


def build_plan(resolved):
    try:
        from ..plan.predict import predict
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("mmtune.plan"):
            raise
        raise NotAvailable("the planner (mmtune.plan.predict) is not installed") from None
    return predict(resolved)


def plan_fix(cfg, resolved, plan, gpu):
    """The smallest changes that make a run that does not fit fit (plan/fixes.py), planned as `plan` was."""
    from ..plan.fixes import find_fix, planner_for

    return find_fix(resolved, first=plan, plan_fn=planner_for(cfg, gpu=gpu.id,
                                                              assume_installed=resolved.target.assume_installed))


@dataclass
class GradModel:
    adapted: Adapted
    resolved: Any  # the run actually built (the tiny twin's when `proxy`)
    proxy: str | None  # the tiny twin used in place of the full-size model, if any

    @property
    def cfg(self):
        return self.resolved.cfg

    def where(self, name: str) -> str:
        return f"{name} (checked on {self.proxy}, same architecture and adapters)" if self.proxy else name


def build_grad_model(resolved) -> GradModel:
    resolved = buildable_here(resolved)
    if is_small(resolved):
        return GradModel(build_adapted(resolved), resolved, None)
    family = resolved.family
    if not family.tiny:
        raise NotAvailable(f"family {family.name} has no tiny twin to run a real backward on")
    from ..resolve import resolve_run

    cfg = resolved.cfg
    twin_cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": family.tiny, "family": family.name})})
    twin = resolve_run(twin_cfg, resolved.target)
    return GradModel(build_adapted(twin), twin, family.tiny)
