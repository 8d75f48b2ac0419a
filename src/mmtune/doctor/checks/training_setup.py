"""Adapter, precision and learning-rate checks from public issue threads (fast: config and the resolved run).

Sources per check: docs/doctor.md.
"""

from __future__ import annotations

import re

from ..findings import error, info, warning
from ..registry import check
from .adapters import targets_on


@check("MM038", "no component is both trained in full and LoRA's target", fast=True)
def full_and_lora(ctx):
    """peft wraps `adapter.train_components` as modules_to_save and skips LoRA targets inside them:
    with the decoder trained in full, LoRA has nothing left ("No modules were targeted for adaptation"
    ... "only targeted modules that are marked to be saved"), the run stops; LoRA named on another
    component trained in full is silently not applied (that component is trained in full anyway)."""
    a = ctx.need("cfg").adapter
    if a.method == "full":
        return
    trained = [c for c in a.train_components if c not in a.freeze_components]
    if "decoder" in trained:
        yield error(f"adapter.train_components=[decoder] with adapter.method={a.method}: the decoder is trained in "
                    "full, so LoRA on the decoder has nothing to adapt and peft stops with \"No modules were targeted "
                    "for adaptation\"", where="adapter.train_components",
                    fix="adapter.method=full with adapter.freeze_components=[...] for what stays frozen; or remove "
                        "decoder from adapter.train_components (LoRA trains it)")
    for comp in trained:
        named = targets_on(a.target_modules, comp)
        if comp != "decoder" and named:
            yield warning(f"adapter.target_modules names {', '.join(named)} on {comp}, which "
                          f"adapter.train_components trains in full: peft does not put LoRA inside a module it trains "
                          "in full, so these targets are dropped", where="adapter.target_modules",
                          fix=f"remove {', '.join(named)} from adapter.target_modules (or {comp} from "
                              "adapter.train_components to train it with LoRA only)")


def trains_in_full(stage, comp: str) -> bool:
    """Whether a train.stages entry trains `comp`'s own weights: unit `comp` or `comp_last_K`."""
    return any(u == comp or u.startswith(comp + "_last_") for u in stage.train)


_QUANTIZED_UNITS = re.compile(r"decoder(_last_\d+)?$")


@check("MM039", "QLoRA never trains the 4-bit decoder weights themselves", fast=True)
def qlora_trains_4bit(ctx):
    """A stage unit `decoder` / `decoder_last_K` under QLoRA asks for requires_grad on uint8 4-bit
    weights: "only Tensors of floating point dtype can require gradients" (bitsandbytes#737)."""
    cfg = ctx.need("cfg")
    if cfg.adapter.method not in ("qlora", "lora8bit"):
        return
    for i, st in enumerate(cfg.train.stages):
        bad = [u for u in st.train if _QUANTIZED_UNITS.match(u)]
        if bad:
            yield error(f"train.stages[{i}].train={st.train} trains {', '.join(bad)} in full, but adapter.method="
                        f"{cfg.adapter.method} stores the decoder's linear layers as integers (4-bit / int8): integer "
                        "weights cannot be trained (\"only Tensors of floating point dtype can require gradients\")",
                        where=f"train.stages[{i}].train",
                        fix="decoder_lora instead (LoRA on the k-bit decoder), or adapter.method=lora to train decoder "
                            "blocks in full")


@check("MM041", "fp16 is not used on an architecture reported to overflow in fp16", needs=("cfg", "resolved"),
       fast=True)
def fp16_overflow_architecture(ctx):
    """A vision tower (registered families) or a decoder (by its model type: Gemma 3) reported to overflow in fp16:
    models/fp16_reports.py holds the reports."""
    from ...models.fp16_reports import fp16_overflow
    from ...models.tiny import is_tiny

    resolved = ctx.need("resolved")
    if resolved.precision != "fp16" or is_tiny(resolved.cfg.model.name):
        return
    # the decoder's reports are by its model type: read from the config when the family states none itself
    config = ctx.need("model_config") if resolved.family.fp16_overflow is None and ctx.has("model_config") else None
    text = None
    if config is not None:
        from .model_setup import text_part

        text = text_part(config, resolved.family)
    known = fp16_overflow(resolved.family, text)
    if known is None:
        return
    severity, part, src = known
    d = resolved.decision("train.precision")
    why = f" ({d.reason})" if d is not None and d.changed else ""
    finding = warning if severity == "warning" else info
    yield finding(f"the run computes in fp16{why}, and {resolved.family.name}'s {part} is reported to overflow "
                  f"in fp16 (inf/NaN activations, NaN loss or gibberish output: {src}); train.nan_guard stops the run "
                  "at the first non-finite loss, after the GPU time is spent", where="train.precision",
                  fix="a GPU with bf16 (--gpu l4 / a10 / a100-40gb, then train.precision=bf16)")


_ENCODER_LR_LIMIT = 1e-4  # LoRA-sized rates (1e-4..2e-4) move a pretrained encoder far from its weights
_FULL_TRAINED = ("vision", "audio")


@check("MM042", "encoders trained in full get an encoder-sized learning rate", fast=True)
def encoder_learning_rate(ctx):
    """A pretrained vision / audio encoder trained in full at the LoRA learning rate: reference
    recipes train the ViT 10-100x slower than the adapters (Qwen2-VL fine-tunes: vision_lr 2e-6 beside
    1e-5; LLaMA-Factory freezes the vision tower by default and users ask for a separate rate, #5831)."""
    from ...models.tiny import is_tiny

    cfg = ctx.need("cfg")
    if is_tiny(cfg.model.name):  # random init: nothing pretrained to protect
        return
    a, t = cfg.adapter, cfg.train
    full = a.method == "full"
    for comp in _FULL_TRAINED:
        if comp in a.freeze_components:
            continue
        mult = a.lr_multipliers.get(comp, 1.0)
        if (full or comp in a.train_components) and not t.stages:
            lr = t.lr * mult
            if lr >= _ENCODER_LR_LIMIT and (not full or t.lr < 1e-4):  # full at >= 1e-4 is MM032's finding
                key = "adapter.train_components" if not full else "adapter.method"
                yield warning(f"{comp} is trained in full at lr {lr:g} (train.lr x adapter.lr_multipliers.{comp}="
                              f"{mult:g}): a LoRA-sized rate that moves the pretrained encoder far from its weights",
                              where=key, fix=f"adapter.lr_multipliers.{comp}={_ENCODER_LR_LIMIT / 10 / t.lr:.2g}")
        for i, st in enumerate(t.stages):
            if trains_in_full(st, comp):
                lr = t.lr * mult * st.lr_multiplier
                if lr >= _ENCODER_LR_LIMIT:
                    yield warning(f"train.stages[{i}] trains {comp} blocks in full at lr {lr:g}: a LoRA-sized rate "
                                  "for a pretrained encoder", where=f"train.stages[{i}].lr_multiplier",
                                  fix=f"adapter.lr_multipliers.{comp}={_ENCODER_LR_LIMIT / 10 / (t.lr * st.lr_multiplier):.2g}")


@check("MM056", "8-bit AdamW does not keep 8-bit states for embeddings trained in full", fast=True)
def adam8bit_embeddings(ctx):
    """bitsandbytes' author: 8-bit optimizer states for embedding layers make LM fine-tuning unstable; use
    32-bit for them (transformers#14819). transformers' Trainer does exactly that for every nn.Embedding
    (register_module_override optim_bits=32); mmtune's optimizer gives every group the same 8-bit AdamW."""
    cfg = ctx.need("cfg")
    a, t = cfg.adapter, cfg.train
    if t.optimizer != "adamw_8bit":
        return
    how = None
    if a.method == "full" and "decoder" not in a.freeze_components:
        how = "adapter.method=full trains the decoder's input embeddings"
    elif any("decoder" in st.train for st in t.stages):
        how = "a train.stages unit `decoder` trains the input embeddings"
    if how:
        yield warning(f"train.optimizer=adamw_8bit and {how}: their Adam states are kept in 8 bits, which "
                      "bitsandbytes reports unstable for embeddings in LM fine-tuning (the transformers Trainer keeps "
                      "nn.Embedding states in 32 bits for this reason)", where="train.optimizer",
                      fix="train.optimizer=adamw (or freeze the decoder: adapter.freeze_components=[decoder])")


# Typical magnitude of a pretrained LM's weights: the initializer_range (std) nearly all of them use.
_TYPICAL_WEIGHT = 0.02


@check("MM058", "pure-bf16 training (train.fp32_trainable=false) takes optimizer steps bf16 weights can hold",
       fast=True)
def pure_bf16_steps(ctx):
    """Without fp32 master weights the optimizer adds its step to a bf16 weight and rounds: bf16 keeps 8
    significant bits, so a step below half the spacing of bf16 numbers around the weight rounds back to
    the same weight (a weight of 0.02 has neighbours 2**-13 apart, so steps under 6.1e-5 vanish). AdamW's
    step is at most about lr, so at a small lr most weights never change and the run silently trains
    nothing but the smallest weights (transformers#21312, Kahan summation in optimi / torchdistx)."""
    import math

    t = ctx.need("cfg").train
    if t.fp32_trainable:
        return
    # weights in [2**e, 2**(e+1)) are 2**(e-7) apart: a step of lr survives rounding only while lr > 2**(e-8)
    lost_from = 2.0 ** (math.floor(math.log2(t.lr)) + 9)
    if lost_from > _TYPICAL_WEIGHT:
        return
    yield warning(f"train.fp32_trainable=false with train.lr={t.lr:g}: without fp32 master weights an optimizer step "
                  f"of at most ~{t.lr:g} rounds away on every bf16 weight of magnitude >= {lost_from:.2g} (bf16 keeps 8 "
                  f"significant bits), which is most of a pretrained model (typical |w| ~ {_TYPICAL_WEIGHT}): those "
                  "weights never change and the loss barely moves", where="train.fp32_trainable",
                  fix="train.fp32_trainable=true (fp32 master copies of the trained weights, the default)")
