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


# FLOPs of the fused attention the trace runs as PyTorch's CPU flash op (the op a flash / mem_efficient call
# on a CUDA target, and every SDPA call on a CPU target, is traced as). torch's flop registry
# (`torch.utils.flop_counter`) has formulas for the CUDA ops (`_scaled_dot_product_flash_attention`,
# `_efficient_attention_forward`, ...) but none for `_scaled_dot_product_flash_attention_for_cpu`, so these
# calls cost no FLOPs and the step-time roofline priced attention as a memory-bound copy of q/k/v/out: long
# sequences came out too fast relative to short ones. The counts follow torch's own formulas
# (`sdpa_flop_count`: QK^T and PV, 2 matmuls; `sdpa_backward_flop_count`: the scores recomputed, dV, dP, dQ,
# dK, 5 matmuls), 2*m*n*k each, over the query heads (GQA shares K/V, not the work). Unlike torch's counter,
# causal calls count only the unmasked (query, key) pairs: FlashAttention-2 and the memory-efficient kernel
# skip key blocks wholly above the diagonal (`flash_fwd_kernel.h`: n_block_max bounded by
# (m_block + 1) * kBlockM + seqlen_k - seqlen_q; the mask is bottom-right aligned), about half the work at
# seqlen_q == seqlen_k. The partly masked diagonal blocks are counted at their unmasked pairs only (a
# block is 128 x 64 to 128 x 128 positions: under 3 % of the pairs at 4k tokens, more at short lengths).
_FLASH_CPU = private_aten("_scaled_dot_product_flash_attention_for_cpu").default
_FLASH_CPU_BWD = private_aten("_scaled_dot_product_flash_attention_for_cpu_backward").default


def _unmasked_pairs(q_len: int, kv_len: int, causal: bool) -> int:
    """(query, key) pairs a kernel computes: all, or under a bottom-right aligned causal mask
    (query i sees keys j <= i + kv_len - q_len)."""
    if not causal:
        return q_len * kv_len
    offset = kv_len - q_len  # row i sees min(kv_len, max(0, i + offset + 1)) keys
    lo = max(0, -offset)  # the first row that sees a key
    hi = min(q_len, kv_len - offset)  # rows from here on see every key
    total = 0
    if hi > lo:  # rows seeing a partial prefix: the sum of (i + offset + 1) over [lo, hi)
        total += (hi - lo) * (offset + 1) + (hi - 1 + lo) * (hi - lo) // 2
    return total + max(0, q_len - max(hi, lo)) * kv_len


def fused_attention_flops(func, args, kwargs=None) -> int:
    """FLOPs of one CPU flash-attention call (forward or backward; module note above), else 0."""
    kwargs = kwargs or {}
    if func is _FLASH_CPU:
        q, k = args[0], args[1]
        causal = bool(args[4]) if len(args) > 4 else bool(kwargs.get("is_causal", False))
        matmuls = 2
    elif func is _FLASH_CPU_BWD:
        q, k = args[1], args[2]
        causal = bool(args[7]) if len(args) > 7 else bool(kwargs.get("is_causal", False))
        matmuls = 5
    else:
        return 0
    if q.dim() != 4 or k.dim() != 4:
        return 0
    b, heads, q_len, head_dim = q.shape
    pairs = _unmasked_pairs(int(q_len), int(k.shape[2]), causal)
    return int(matmuls * 2 * b * heads * pairs * head_dim)
