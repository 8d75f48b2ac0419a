"""One real forward + backward per kind of batch the data holds (text-only, image, video, audio):
which trainable parameters get a gradient from which kind of batch."""

from __future__ import annotations

import contextlib


def example_batches(processor, family, signatures) -> dict[str, dict]:
    """{signature: one-sample batch with labels}; a signature is '+'-joined media types or 'text'."""
    from ..models.examples import example_batch

    out = {}
    for sig in signatures:
        mods = tuple(m for m in sig.split("+") if m != "text")
        if any(m not in family.modalities for m in mods):
            continue
        if mods:
            out[sig] = example_batch(processor, mods)
        else:  # text only, through the tokenizer (a multimodal processor's positional arg is images)
            tok = getattr(processor, "tokenizer", processor)
            msgs = [{"role": "user", "content": "How many circles are there?"},
                    {"role": "assistant", "content": "3"}]
            text = tok.apply_chat_template(msgs, tokenize=False)
            batch = dict(tok([text], return_tensors="pt", add_special_tokens=False))
            labels = batch["input_ids"].clone()
            labels[:, :-3] = -100  # the answer and end of turn only
            batch["labels"] = labels
            out[sig] = batch
    return out


def grad_sources(model, batches: dict[str, dict], dtype) -> tuple[list[str], dict[str, set[str]]]:
    """(trainable parameter names, {name: signatures whose backward reached it})."""
    import torch

    from ..loss import loss_sum

    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    reached: dict[str, set[str]] = {n: set() for n in trainable}
    model.train()
    for sig, batch in batches.items():
        model.zero_grad(set_to_none=True)
        ac = torch.autocast("cpu", dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()
        with ac:
            total, _ = loss_sum(model, batch)
        total.backward()
        for n, p in model.named_parameters():
            if p.requires_grad and p.grad is not None:
                reached[n].add(sig)
    model.zero_grad(set_to_none=True)
    return trainable, reached


def plain_name(name: str) -> str:
    """A (peft-wrapped) parameter's name in the bare model; a LoRA weight maps to the layer it adapts."""
    from ..adapters import base_name, is_lora_param

    if is_lora_param(name):
        return base_name(name.split(".lora_")[0]) + ".weight"
    return base_name(name)


def plain_reach(tiny_name: str, family) -> dict[str, set[str]]:
    """{parameter: batch kinds whose backward reaches it} in the bare tiny twin: every parameter
    trainable, no adapters, no checkpointing, one batch per modality the family takes. What the
    model's own forward uses, independent of the run's setup: a parameter no kind reaches here is
    unused by design (LLaVA's `vision_feature_layer=-2` leaves the last vision layer unused)."""
    import torch

    from ..models.tiny import build_tiny

    model, processor = build_tiny(tiny_name)
    for p in model.parameters():
        p.requires_grad_(True)
    kinds = ["text"] + [m for m in family.modalities if m != "text"]
    _, reached = grad_sources(model, example_batches(processor, family, kinds), torch.float32)
    return reached
