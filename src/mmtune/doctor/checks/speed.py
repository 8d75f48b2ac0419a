"""Settings that let a run train, only several times slower than the same run set well (docs/doctor.md, "batch 16").

Each is a setting mmtune takes as asked (the user may want it: fp32 to compare numerics, eager attention to read
attention weights, ungrouped batches where length follows the task), so the resolved run keeps it and these say
what it costs on the target, with the override that removes the cost:
- MM181: fp32 matmuls on a GPU with bf16 tensor cores, eager attention where the model class has SDPA;
- MM182: micro-batches that are mostly padding, from the data scan's real lengths and the run's own sampler;
- MM343: a hybrid decoder's linear-attention layers (Qwen3.5) on transformers' torch fallback, the fast kernels
  (flash-linear-attention, causal-conv1d) missing where a CUDA run executes.
"""

from __future__ import annotations

from ..findings import info, warning
from ..registry import check

# Padding share of micro-batch positions from which MM182 speaks: a third of the positions is 1.5x the tokens'
# own compute (benchmarks: 35 % padding cost 1.40x tokens/s on the tiny Qwen2-VL, docs/data.md), and only when
# grouping would at least halve it (records of nearly one length gain nothing from it).
PADDING_SHARE = 1 / 3


@check("MM181", "the run uses the target GPU's fast paths: no fp32 matmuls where bf16 runs on tensor cores, no "
       "eager attention where the model has SDPA", needs=("cfg", "gpu", "resolved"), fast=True)
def fast_paths(ctx):
    cfg, gpu, resolved = ctx.need("cfg"), ctx.need("gpu"), ctx.need("resolved")
    if cfg.train.device == "cpu":
        return  # pinned to the CPU (the demo): no GPU path to miss, whatever GPU the doctor is given
    if resolved.precision == "fp32" and gpu.bf16 and gpu.bf16_tflops and gpu.fp32_tflops:
        ratio = gpu.bf16_tflops / gpu.fp32_tflops
        yield warning(f"train.precision=fp32 on {gpu.name}: every matmul runs at its fp32 peak, "
                      f"{gpu.fp32_tflops:g} TFLOP/s (torch's default, TF32 off), against {gpu.bf16_tflops:g} "
                      f"TFLOP/s for bf16 on its tensor cores ({ratio:.0f}x), and the frozen weights take twice the "
                      "memory; `mmtune plan` times the step at the fp32 rate", where="train.precision",
                      fix="train.precision=bf16   (autocast: trainable weights, gradients and optimizer state stay fp32)")
    if resolved.attn_implementation == "eager" and _has_sdpa(resolved.family):
        yield warning(f"model.attn_implementation=eager on {gpu.name}: every layer builds its (heads x seq x seq) "
                      f"scores and softmax in memory, where {resolved.family.model_class} runs torch's SDPA "
                      "(flash / memory-efficient kernels: O(seq) memory, fused)", where="model.attn_implementation",
                      fix="model.attn_implementation=auto   (FlashAttention-2 where installed and supported, else sdpa)")


def _has_sdpa(family) -> bool:
    """Whether the family's model class has SDPA in the installed transformers (False where unknown: an Auto
    class, a model brought by import path, whose eager may be the only attention it has)."""
    from ...compat.transformers_internals import sdpa_support
    from ...models.construct import known_class

    cls = known_class(family) if family is not None else None
    return cls is not None and sdpa_support(cls) is True


@check("MM182", "micro-batches are not mostly padding: records of very different lengths are grouped (or packed)",
       needs=("cfg", "scan"))
def padding_share(ctx):
    cfg, scan = ctx.need("cfg"), ctx.need("scan")
    mb = cfg.train.micro_batch_size
    if mb < 2 or cfg.data.packing or cfg.data.group_by_length or cfg.data.streaming:
        return  # one record a micro-batch has no padding; grouping / packing is on; a stream can do neither
    train = next((s for s in scan.splits if s.split == "train"), None)
    lengths = list(train.lengths) if train is not None else []
    if len(lengths) < 2 * mb:
        return
    plain, grouped = (_padding(lengths, mb, cfg.train.seed, grouped=g) for g in (False, True))
    if plain >= PADDING_SHARE and grouped <= plain / 2:
        yield warning(f"train: {plain:.0%} of micro-batch positions are padding in the run's first epoch (micro-batch "
                      f"{mb}, records of {min(lengths)}-{max(lengths)} tokens, median {train.percentile(0.5)}): each "
                      f"step computes {1 / (1 - plain):.1f}x the tokens it trains on; grouped by length, {grouped:.0%}",
                      where="data.group_by_length",
                      fix="data.group_by_length=true   (or data.packing=true; records of similar length share a step)")


def _padding(lengths: list[int], mb: int, seed: int, *, grouped: bool) -> float:
    """Share of the padded positions in epoch 0's micro-batches, drawn by the run's own sampler and padded to each
    micro-batch's longest record as the collator pads."""
    from ...data.batches import micro_batches_of_epoch

    batches = micro_batches_of_epoch(len(lengths), seed=seed, epoch=0, micro_batch_size=mb,
                                     lengths=lengths if grouped else None)
    positions = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    tokens = sum(lengths[i] for b in batches for i in b)
    return 1 - tokens / positions if positions else 0.0


@check("MM343", "a hybrid decoder's linear-attention layers run their fast kernels (flash-linear-attention, "
       "causal-conv1d) where a CUDA run executes", needs=("cfg", "resolved"), fast=True)
def linear_attention_kernels(ctx):
    """Without them transformers runs its torch reference of the gated delta rule (resolve/linear_attention.py):
    correct, slower (MEASURED: 1.7x a Qwen3.5-9B step), said once in the log. A warning where the run executes
    here on CUDA, an info for a plan for another GPU (that machine needs them); nothing on a CPU, where the
    kernels cannot run."""
    from ...resolve.linear_attention import MEASURED, install_line, missing_kernels

    cfg, resolved = ctx.need("cfg"), ctx.need("resolved")
    family, target = resolved.family, resolved.target
    if not family.linear_attention or target.gpu is None or cfg.train.device == "cpu":
        return
    names = ", ".join(f"{dist} ({what})" for _, dist, what in family.linear_attention)
    if not target.local:
        yield info(f"{family.name}'s linear-attention layers run {names} on {target.gpu.name} where installed, else "
                   f"transformers' torch fallback (a Python loop over 64-token chunks in fp32; {MEASURED}); "
                   "the plan traces the fallback's memory, its step time is the FLOPs' roofline", where="model.name",
                   fix=f"{install_line(family.linear_attention)}   (on the GPU machine, built for its torch / CUDA)")
        return
    missing = missing_kernels(family)
    if missing:
        yield warning(f"{family.name}'s linear-attention layers will run transformers' torch fallback on "
                      f"{target.gpu.name}: {', '.join(d for _, d, _ in missing)} not importable here (the fp32 gated "
                      f"delta rule as a Python loop over 64-token chunks: correct but slower, {MEASURED}; "
                      "transformers says it once in the log)", where="model.name",
                      fix=f"{install_line(missing)}   (built for this torch / CUDA)")
