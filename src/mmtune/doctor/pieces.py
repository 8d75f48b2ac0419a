"""Builders for the heavier context pieces: processor, model (real for tiny twins, `meta` for
full-size models), model with adapters, and the planner's prediction. Each uses the same functions
training uses (models.loading, build.build_model_and_adapters), so what doctor inspects is what
`mmtune train` would build."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .context import NotAvailable


@dataclass
class ProcessorInfo:
    processor: Any
    family: Any


def is_small(cfg) -> bool:
    """Tiny twins are built for real (a real backward runs in a second); other models on meta."""
    from ..models.tiny import is_tiny

    return is_tiny(cfg.model.name)


def compute_dtype(cfg, real: bool):
    import torch

    d = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.train.precision]
    # fp16 kernels are a GPU path; a real CPU run of the same structure uses bf16 instead (same
    # parameters, same graph, so the same gradient flow).
    return torch.bfloat16 if (real and d == torch.float16) else d


def build_processor_info(cfg, loaded=None) -> ProcessorInfo:
    from ..models.loading import _load_processor, model_folder, resolve_family
    from ..models.tiny import is_tiny, tiny_config_and_processor

    if loaded is not None and loaded.processor is not None:
        return ProcessorInfo(loaded.processor, loaded.family)
    family = resolve_family(cfg)
    if is_tiny(cfg.model.name):
        return ProcessorInfo(tiny_config_and_processor(cfg.model.name)[1], family)
    src = model_folder(cfg.model.name, cfg.model.revision, family)
    try:
        return ProcessorInfo(_load_processor(str(src), family, cfg), family)
    except OSError as e:
        from ..errors import ModelLoadError

        raise ModelLoadError(f"cannot load the processor of {cfg.model.name}: {e}", where="model.name",
                             fix=f"mmtune download {cfg.model.name}") from None


def build_loaded(cfg):
    from ..models.loading import load_model

    real = is_small(cfg)
    return load_model(cfg, device="cpu", dtype=compute_dtype(cfg, real), meta=not real)


@dataclass
class Adapted:
    loaded: Any
    result: Any  # AdapterResult
    real: bool


def build_adapted(cfg, _loaded=None) -> Adapted:
    """A fresh model with adapters (peft wraps in place, so the `loaded` piece stays untouched)."""
    from ..build import build_model_and_adapters

    real = is_small(cfg)
    loaded, result = build_model_and_adapters(cfg, device="cpu", dtype=compute_dtype(cfg, real), meta=not real)
    return Adapted(loaded, result, real)


def build_plan(cfg, gpu):
    try:
        from ..plan.predict import predict
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("mmtune.plan"):
            raise
        raise NotAvailable("the planner (mmtune.plan.predict) is not installed") from None
    return predict(cfg, gpu=gpu.id)


@dataclass
class GradModel:
    adapted: Adapted
    cfg: Any  # the config actually built (the tiny twin's when `proxy`)
    proxy: str | None  # the tiny twin used in place of the full-size model, if any

    def where(self, name: str) -> str:
        return f"{name} (checked on {self.proxy}, same architecture and adapters)" if self.proxy else name


def family_of(cfg):
    """The model's family from its config on disk, else from the embedded public config (no download)."""
    from ..errors import ModelLoadError
    from ..models.families import family_for_model_type, get_family
    from ..models.loading import resolve_family

    try:
        return resolve_family(cfg)
    except ModelLoadError:
        from ..models.configs import embedded

        spec = embedded(cfg.model.name)
        if spec is None:
            raise
        return get_family(cfg.model.family) if cfg.model.family else family_for_model_type(spec["config"]["model_type"])


def build_grad_model(cfg) -> GradModel:
    if is_small(cfg):
        return GradModel(build_adapted(cfg), cfg, None)
    family = family_of(cfg)
    if not family.tiny:
        raise NotAvailable(f"family {family.name} has no tiny twin to run a real backward on")
    twin = cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": family.tiny, "family": family.name})})
    return GradModel(build_adapted(twin), twin, family.tiny)
