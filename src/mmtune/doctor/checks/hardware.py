"""Hardware checks against the target GPU (--gpu NAME or train.gpu): bf16, FlashAttention-2.

The decisions themselves (bf16 -> fp16 + GradScaler on a GPU without bf16, sdpa for FlashAttention-2
where it cannot run) are the resolved run's (mmtune.resolve); these checks report them, and say what
the run cannot decide for itself.
"""

from __future__ import annotations

import importlib.util

from ..findings import error, info, warning
from ..registry import check


@check("MM005", "the run's precision on the target GPU (bf16 where unsupported: the run's own fp16 + "
       "GradScaler decision, reported)", needs=("cfg", "gpu", "resolved"), fast=True, failure_mode=5,
       claims=("gpu",))
def bf16_supported(ctx):
    d = ctx.need("resolved").decision("train.precision")
    if d is not None and d.changed:
        yield info(f"train.precision: {d.value} ({d.reason}); train decides the same on that GPU",
                   where="train.precision", fix="train.precision=fp16 to say so in the config")


@check("MM025", "FlashAttention-2 is supported by the target GPU", needs=("cfg",), fast=True, failure_mode=5)
def fa2_supported(ctx):
    """sm80+ (GPUSpec.fa2). Consumer Blackwell (sm_120, RTX 50xx) runs FlashAttention-2's Ampere kernels (Tri Dao
    in flash-attention#1853: "The Ampere code (FA2) should run fine on sm_120"; setup.py builds sm_120 with CUDA 12.8+,
    FLASH_ATTN_CUDA_ARCHS default "80;90;100;120"), but only from a build that has them (#1638, #2168: "no kernel
    image is available" from wheels without sm_120): said as an info, not refused."""
    cfg = ctx.need("cfg")
    if cfg.model.attn_implementation != "flash_attention_2":
        return
    if ctx.has("gpu"):
        gpu = ctx.need("gpu")
        if not gpu.fa2:
            major, minor = gpu.compute_capability
            yield error(f"model.attn_implementation=flash_attention_2 but {gpu.name} is sm_{major}{minor}; "
                        "FlashAttention-2 needs sm_80+ (Ampere or newer)", where="model.attn_implementation",
                        fix="model.attn_implementation=sdpa")
        elif gpu.compute_capability >= (12, 0):
            yield info(f"FlashAttention-2 runs on {gpu.name} (sm_120) from a flash-attn built with CUDA 12.8+ for sm_120 "
                       "(its setup.py adds sm_120 only then); a build without it stops at the first attention with "
                       "\"no kernel image is available for execution on the device\" (flash-attention#1638)",
                       where="model.attn_implementation",
                       fix="on the GPU machine, with CUDA 12.8+: FLASH_ATTN_CUDA_ARCHS=120 pip install flash-attn "
                           "--no-build-isolation (or model.attn_implementation=sdpa)")
    if ctx.has("resolved") and ctx.need("resolved").precision == "fp32":
        yield error("FlashAttention-2 only runs in fp16/bf16, and the run is fp32",
                    where="train.precision", fix="train.precision=bf16 (or fp16 on GPUs without bf16)")
    if importlib.util.find_spec("flash_attn") is None:
        yield info("flash_attn is not installed on this machine; the GPU machine needs it",
                   where="model.attn_implementation", fix="pip install 'mmtune[gpu]' on the GPU machine")


@check("MM006", "fp16 runs are guarded against loss 0 / NaN", needs=("cfg", "resolved"), fast=True, failure_mode=6)
def fp16_guarded(ctx):
    cfg, resolved = ctx.need("cfg"), ctx.need("resolved")
    if resolved.precision != "fp16":
        return
    gpu = resolved.target.gpu
    if cfg.train.precision == "fp16" and gpu is not None and gpu.bf16:
        yield warning(f"train.precision=fp16 on {gpu.name}, which has bf16: fp16 overflows to inf/NaN and "
                      "underflows to loss 0 in Qwen-style models", where="train.precision",
                      fix="train.precision=bf16")
    if not cfg.train.nan_guard:
        yield warning("the run is fp16 with train.nan_guard=false: a NaN/inf loss would train on silently",
                      where="train.nan_guard", fix="train.nan_guard=true")


@check("MM081", "Liger-Kernel (train.fused_kernels=liger, train.loss_impl=liger) can run where the run executes",
       needs=("cfg", "resolved"), fast=True)
def liger_kernels_runnable(ctx):
    """The resolved run refuses `liger` for either key on this machine when it cannot run; a plan for another
    GPU keeps it (modelled by the planner) and this says what that machine needs. Liger's per-family patches
    import transformers' modeling code and break when transformers renames it (Liger-Kernel issue #528)."""
    resolved = ctx.need("resolved")
    d = resolved.decision("train.fused_kernels")
    if d is not None and d.value.startswith("liger") and d.reason.startswith("requested; here: "):
        yield info(f"train.fused_kernels=liger is planned, but {d.reason.removeprefix('requested; here: ')}; the GPU "
                   f"machine needs liger-kernel able to patch {resolved.family.name} with its transformers",
                   where="train.fused_kernels", fix="pip install 'mmtune[gpu]' (liger-kernel) on the GPU machine (or "
                                                     "train.fused_kernels=none to plan without it)")
    d = resolved.decision("train.loss_impl")
    if d is not None and d.value == "liger" and d.reason.startswith("requested; here: "):
        why = d.reason.removeprefix("requested; here: ").split("; ")[0]
        yield info(f"train.loss_impl=liger is planned, but {why}; the GPU machine needs liger-kernel for its fused "
                   "linear cross entropy (without it the run there is refused)",
                   where="train.loss_impl", fix="pip install 'mmtune[gpu]' (liger-kernel) on the GPU machine (or "
                                                "train.loss_impl=chunked: the same memory saving in torch)")
