"""Non-reentrant activation checkpointing, so LoRA + DDP + checkpointing work together (failure modes 11, 13)."""

from __future__ import annotations


def enable_checkpointing(model, context_fn=None) -> list[str]:
    """Non-reentrant activation checkpointing (transformers 5 name first, the v4 name as fallback), and on the
    layer stacks the model's own checkpointing leaves out (models/left_out_layers.py): returns those stacks.
    `context_fn`: torch.utils.checkpoint's (forward context, recomputation context) factory (the planner's)."""
    from .left_out_layers import checkpoint_left_out_layers

    kwargs = {"use_reentrant": False, **({"context_fn": context_fn} if context_fn is not None else {})}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return checkpoint_left_out_layers(model, context_fn)


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
        left_out = enable_checkpointing(model, context_fn)
        # config.use_cache is left as the model has it: every training forward passes use_cache=False itself
        # (loss.py, objectives/), while the config is what checkpoints and exports save, so a False here would
        # ship an inference model without its KV cache (https://github.com/hiyouga/LlamaFactory/issues/1161).
        text_input_grads_only(model)
        return "on (non-reentrant)" + (f"; also {', '.join(left_out)}, which {type(model).__name__}'s own "
                                       "checkpointing leaves out" if left_out else "")
    return (f"off: {type(model).__name__} does not support it (model.gradient_checkpointing=true has no effect: "
            "every layer's activations are kept, as mmtune plan counts them)")


def text_input_grads_only(model) -> None:
    """Frozen embeddings + gradient checkpointing: the *text* embeddings' output requires grad (failure mode 11),
    and nothing else does.

    transformers 5's `enable_input_require_grads` (run by transformers when checkpointing is enabled and by peft
    when it wraps the model) hooks every sub-model's input embeddings, a vision tower's patch embedding too: a
    frozen tower's output then requires grad, so autograd records the whole tower and keeps its activations for
    a backward that updates nothing in it (Llama 3.2 Vision 11B, LoRA, micro-batch 4, 1 image: 219 GiB of
    planned activations with those hooks). A tower with trainable parameters records its own graph through
    them, hooked or not; the decoder's checkpointed layers need their input to require grad, which this keeps.
    """
    from ..compat.transformers_internals import drop_input_require_grads_hooks

    drop_input_require_grads_hooks(model)
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if emb is not None and not any(p.requires_grad for p in emb.parameters()) and is_checkpointing(model):
        emb.register_forward_hook(_output_requires_grad)


def _output_requires_grad(module, args, output):
    output.requires_grad_(True)


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
            enable_checkpointing(mod, context_fn)  # its config.use_cache kept: see apply_checkpointing
            done.append(name)
    return done
