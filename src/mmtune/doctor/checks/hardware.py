"""Hardware checks against the target GPU's spec (--gpu NAME or train.gpu): bf16, FlashAttention-2."""

from __future__ import annotations

import importlib.util

from ..findings import error, info, warning
from ..gpu import sm, supports_bf16, supports_fa2
from ..registry import check


@check("MM005", "bf16 is supported by the target GPU", needs=("cfg", "gpu"), fast=True, failure_mode=5,
       claims=("gpu",))
def bf16_supported(ctx):
    cfg, gpu = ctx.need("cfg"), ctx.need("gpu")
    if cfg.train.precision == "bf16" and not supports_bf16(gpu):
        yield error(f"train.precision=bf16 but {gpu.name} ({sm(gpu)}) has no bf16: kernels fail or fall back "
                    "to slow emulation", where="train.precision",
                    fix="train.precision=fp16 (mmtune adds a GradScaler and a NaN guard)")


@check("MM025", "FlashAttention-2 is supported by the target GPU", needs=("cfg",), fast=True, failure_mode=5)
def fa2_supported(ctx):
    cfg = ctx.need("cfg")
    if cfg.model.attn_implementation != "flash_attention_2":
        return
    if ctx.has("gpu"):
        gpu = ctx.need("gpu")
        if not supports_fa2(gpu):
            yield error(f"model.attn_implementation=flash_attention_2 but {gpu.name} is {sm(gpu)}; "
                        "FlashAttention-2 needs sm_80+ (Ampere or newer)", where="model.attn_implementation",
                        fix="model.attn_implementation=sdpa")
    if cfg.train.precision == "fp32":
        yield error("FlashAttention-2 only runs in fp16/bf16, and train.precision=fp32",
                    where="train.precision", fix="train.precision=bf16 (or fp16 on GPUs without bf16)")
    if importlib.util.find_spec("flash_attn") is None:
        yield info("flash_attn is not installed on this machine; the GPU machine needs it",
                   where="model.attn_implementation", fix="pip install 'mmtune[gpu]' on the GPU machine")


@check("MM006", "fp16 runs are guarded against loss 0 / NaN", needs=("cfg",), fast=True, failure_mode=6)
def fp16_guarded(ctx):
    cfg = ctx.need("cfg")
    if cfg.train.precision != "fp16":
        return
    if ctx.has("gpu") and supports_bf16(ctx.need("gpu")):
        gpu = ctx.need("gpu")
        yield warning(f"train.precision=fp16 on {gpu.name}, which has bf16: fp16 overflows to inf/NaN and "
                      "underflows to loss 0 in Qwen-style models", where="train.precision",
                      fix="train.precision=bf16")
    if not cfg.train.nan_guard:
        yield warning("train.precision=fp16 with train.nan_guard=false: a NaN/inf loss would train on silently",
                      where="train.nan_guard", fix="train.nan_guard=true")
