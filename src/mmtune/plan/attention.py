"""Each SDPA call traced with the kernel the target GPU runs (read from the resolved run's
`attention.kernels` decision), so attention memory follows the implementation and the sequence length.

The plan executes on CPU fake tensors, where `scaled_dot_product_attention` would take the CPU kernel.
On a CUDA target PyTorch picks, per call, the first of its kernels that accepts the call's arguments
(`sdp_utils.cpp`, torch 2.5+):
- flash: fp16/bf16, no explicit `attn_mask`, head dim <= 256; GQA (`enable_gqa`) accepted;
- mem_efficient: any mask, head dim a multiple of 8 (16-bit) / 4 (fp32); GQA with differing head
  counts is refused (transformers passes `enable_gqa=True` whenever the mask is None);
- math: everything else; it upcasts q/k/v to fp32, materialises the (B, H, Lq, Lkv) scores and softmax
  in fp32 (and the fp32 causal mask), and autograd keeps the softmax for backward.
flash and mem_efficient keep O(seq) memory (output + an fp32 log-sum-exp), as the CPU kernel the trace
runs, so the call goes through unchanged; math is traced as PyTorch's own math composite
(`aten._scaled_dot_product_attention_math`), so its O(seq^2) buffers are real events of the trace.
Not modelled: the CUDA kernels' internal workspaces (e.g. the fp32 grad-q accumulator of the
memory-efficient backward, O(seq)).
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from ..compat.torch_internals import private_aten

_SDPA = torch.nn.functional.scaled_dot_product_attention
_HALF = (torch.float16, torch.bfloat16)


def kernels_of(resolved) -> tuple[str, ...] | None:
    """The target's SDPA kernels in preference order, or None when the trace already runs the target's
    path (eager, CPU) — read from the resolved run's decision."""
    d = resolved.decision("attention.kernels")
    if d is None or d.value in ("eager", "cpu"):
        return None
    if d.value == "flash_attention_2":
        return ("flash",)
    return tuple(d.value.split(">"))


def kernel_for_call(kernels, q, k, attn_mask=None, enable_gqa=False) -> str:
    """The first of `kernels` that accepts this call (module docstring), else math."""
    head = q.shape[-1]
    gqa = enable_gqa and q.shape[-3] != k.shape[-3]
    for name in kernels:
        if name == "flash" and q.dtype in _HALF and attn_mask is None and head <= 256:
            return "flash"
        if name == "mem_efficient" and not gqa and head % (8 if q.dtype in _HALF else 4) == 0:
            return "mem_efficient"
    return "math"


class TargetAttentionMode(TorchFunctionMode):
    """Routes each `F.scaled_dot_product_attention` call to the target's kernel; counts calls per kernel.

    A function mode (above autograd), so the math composite is differentiated like any model code. Under
    checkpointing the recomputation in backward must route as the forward did, or checkpointing refuses
    the mismatch; torch does not keep function modes there (2.13 re-entered only the forward's
    DeviceContext, 2.14.1 a fresh one), so the planner also makes this mode checkpointing's recomputation
    context (its public `context_fn`, planner._trace). Entered nested there, which a plain mode allows."""

    def __init__(self, kernels: tuple[str, ...]):
        super().__init__()
        self.kernels = kernels
        self.calls: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not _SDPA:
            return func(*args, **kwargs)
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
        a = dict(zip(names, args))
        a.update(kwargs)
        kernel = kernel_for_call(self.kernels, a["query"], a["key"], a.get("attn_mask"), a.get("enable_gqa", False))
        self.calls[kernel] = self.calls.get(kernel, 0) + 1
        if kernel != "math":
            return func(*args, **kwargs)
        math = private_aten("_scaled_dot_product_attention_math").default
        return math(a["query"], a["key"], a["value"], a.get("attn_mask"), a.get("dropout_p", 0.0),
                    a.get("is_causal", False), None, scale=a.get("scale"), enable_gqa=a.get("enable_gqa", False))[0]
