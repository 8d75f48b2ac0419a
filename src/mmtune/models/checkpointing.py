"""Non-reentrant activation checkpointing, so LoRA + DDP + checkpointing work together (failure modes 11, 13)."""

from __future__ import annotations


def enable_checkpointing(model, context_fn=None) -> None:
    """Non-reentrant activation checkpointing (transformers 5 name first, the v4 name as fallback).
    `context_fn`: torch.utils.checkpoint's (forward context, recomputation context) factory (the planner's)."""
    kwargs = {"use_reentrant": False, **({"context_fn": context_fn} if context_fn is not None else {})}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def apply_checkpointing(model, family, context_fn=None) -> str:
    """Non-reentrant activation checkpointing as a run has it (model.gradient_checkpointing): on each
    transformers part of a brought model, else on the model where it supports it; returns the decision's
    text. `context_fn`: torch.utils.checkpoint's (forward, recomputation) contexts (the planner's routing)."""
    if family.custom:
        parts = enable_part_checkpointing(model, context_fn)
        return (f"on (non-reentrant) in {', '.join(parts)}" if parts else
                f"off: no part of {type(model).__name__} supports it")
    if getattr(model, "supports_gradient_checkpointing", False):
        # Non-reentrant: works with frozen inputs, LoRA and DDP (failure modes 11, 13).
        enable_checkpointing(model, context_fn)
        model.config.use_cache = False
        return "on (non-reentrant)"
    return f"off: {type(model).__name__} does not support it"


def is_checkpointing(model) -> bool:
    for attr in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), attr) or hasattr(model, attr):
            return bool(getattr(model, attr))
    return False


def enable_part_checkpointing(model, context_fn=None) -> list[str]:
    """Non-reentrant activation checkpointing on each transformers part of a custom model (its vision
    tower, its language model) that supports it; returns their names."""
    done = []
    for name, mod in model.named_modules():
        if not name or any(name.startswith(d + ".") for d in done):
            continue
        if getattr(mod, "supports_gradient_checkpointing", False) and hasattr(mod, "config"):
            enable_checkpointing(mod, context_fn)
            mod.config.use_cache = False
            done.append(name)
    return done
