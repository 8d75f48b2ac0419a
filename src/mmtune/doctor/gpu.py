"""The target GPU's spec, read from the planner's catalog (mmtune.plan.gpus); doctor keeps no copy."""

from __future__ import annotations

from .context import NotAvailable


def lookup_gpu(name: str):
    try:
        from ..plan import gpus
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("mmtune.plan"):
            raise
        raise NotAvailable("the GPU catalog (mmtune.plan.gpus) is not installed") from None
    return gpus.get_gpu(name)  # raises ConfigError with a did-you-mean for an unknown name


def supports_bf16(spec) -> bool:
    return bool(spec.bf16)


def supports_fa2(spec) -> bool:
    return tuple(spec.compute_capability) >= (8, 0)


def sm(spec) -> str:
    major, minor = spec.compute_capability
    return f"sm_{major}{minor}"
