"""Layer stacks that a model's own gradient checkpointing leaves out, checkpointed by mmtune.

transformers 5 checkpoints a layer only through `GradientCheckpointingLayer`: `gradient_checkpointing_enable`
sets `gradient_checkpointing = True` on every encoder that declares the flag, but an encoder whose layers are
plain modules never reads it. Mllama's vision encoders (32 + 8 layers over 4 tiles of 1601 patches in Llama 3.2
Vision 11B) and Phi-4-multimodal's audio conformer are such: with the tower trained (a stage, or LoRA on it)
every activation of it was kept while the run said "gradient checkpointing: on" (unsloth patched the Mllama
layers for the same OOM: https://github.com/unslothai/unsloth-zoo/pull/264). Those layers are checkpointed here
the way transformers checkpoints its own: non-reentrant, in training with grad enabled, only while the
encoder's flag is on.
"""

from __future__ import annotations

import functools


def checkpoint_left_out_layers(model, context_fn=None) -> list[str]:
    """Checkpoint each layer stack of an encoder that says it checkpoints (`gradient_checkpointing` True) but
    holds no `GradientCheckpointingLayer`; returns the stacks' names. Idempotent: a second call (the planner's,
    with its `context_fn`) rebinds the same wrapper."""
    import torch
    from transformers.modeling_layers import GradientCheckpointingLayer

    done = []
    for name, owner in model.named_modules():
        if getattr(owner, "gradient_checkpointing", False) is not True:
            continue
        stacks = [(n, c) for n, c in owner.named_children() if isinstance(c, torch.nn.ModuleList) and len(c)]
        # An owner with one checkpointed stack (Qwen3-VL's blocks beside its deepstack mergers) is the model's
        # own design: only owners that checkpoint nothing are completed.
        if not stacks or any(isinstance(layer, GradientCheckpointingLayer) for _, c in stacks for layer in c):
            continue
        for child, stack in stacks:
            for layer in stack:
                layer.forward = functools.partial(_checkpointed, layer, owner, context_fn)
            done.append(f"{name}.{child}" if name else child)
    return done


def _checkpointed(layer, owner, context_fn, *args, **kwargs):
    import torch
    from torch.utils.checkpoint import checkpoint

    forward = type(layer).forward.__get__(layer)
    if not (owner.gradient_checkpointing and layer.training and torch.is_grad_enabled()):
        return forward(*args, **kwargs)
    extra = {"context_fn": context_fn} if context_fn is not None else {}
    return checkpoint(forward, *args, use_reentrant=False, **extra, **kwargs)
