"""Memory that CPU kernels allocate for themselves, below the dispatcher (CPU targets only).

A dispatch-level trace sees every tensor an op returns, never the scratch buffers its kernel allocates
and frees inside one call. On CPU the one that matters is SDPA's flash kernel (the path
`scaled_dot_product_attention` takes on CPU, `aten/src/ATen/native/cpu/FlashAttentionKernel.cpp`):
long sequences (Whisper-style audio encoders run 1,500 positions) make its per-thread blocks
megabytes, and under gradient checkpointing the backward of the recomputed encoder is where the step
peaks (the Qwen2-Audio misses of the accuracy benchmark: -8.2 % before this rule).

The rule follows the kernel's own sizing, from the op's shapes and the number of threads:
  q_split = 256 if Lq >= 768 else 64 if Lq >= 192 else 32 (capped at Lq), kv_split = min(512, Lkv);
  forward:  T x (q_split*kv_split + 2*q_split + q_split*E) accumulate-type elements
            (+ T x q_split*kv_split in the input dtype for bf16/fp16);
  backward: T x 2*q_split*kv_split accumulate-type elements (+ the same in the input dtype for
            bf16/fp16), one q_split row-sum per thread, and a contiguous copy of grad_out when its
            (B, L, H, E) transpose is not contiguous.
Checked byte for byte against torch.profiler's allocator events for fp32 (tests/plan). For bf16/fp16
the kernel's cpublas gemm also converts blocks internally; those are not modelled. GPU targets do
not use this rule: CUDA attention kernels have their own workspaces (not modelled).
"""

from __future__ import annotations

import torch

from ..compat.torch_internals import private_aten

_FWD = private_aten("_scaled_dot_product_flash_attention_for_cpu").default
_BWD = private_aten("_scaled_dot_product_flash_attention_for_cpu_backward").default
_REDUCED = (torch.bfloat16, torch.float16)


def _splits(q_len: int, kv_len: int) -> tuple[int, int]:
    q_split = 256 if q_len >= 768 else 64 if q_len >= 192 else 32
    return min(q_split, q_len), min(512, kv_len)


def _contiguous(shape, stride) -> bool:
    expected = 1
    for size, st in reversed(list(zip(shape, stride))):
        if size != 1 and st != expected:
            return False
        expected *= size
    return True


def cpu_kernel_workspaces(func, args, threads: int) -> list[int]:
    """Byte sizes of the scratch buffers `func`'s CPU kernel allocates (and frees) inside the call."""
    if func is _FWD:
        q, k = args[0], args[1]  # (B, H, L, E)
    elif func is _BWD:
        grad_out, q, k = args[0], args[1], args[2]
    else:
        return []
    q_len, kv_len, head = q.shape[2], k.shape[2], q.shape[3]
    qs, kvs = _splits(q_len, kv_len)
    reduced = q.dtype in _REDUCED
    acc = 4 if reduced or q.dtype == torch.float32 else q.element_size()
    el = q.element_size()
    if func is _FWD:
        out = [threads * (qs * kvs + 2 * qs + qs * head) * acc]
        if reduced:
            out.append(threads * qs * kvs * el)
        return out
    out = []
    shape, stride = grad_out.shape, grad_out.stride()  # the kernel wants grad_out as (B, L, H, E)
    t_shape = (shape[0], shape[2], shape[1], shape[3])
    t_stride = (stride[0], stride[2], stride[1], stride[3])
    if not _contiguous(t_shape, t_stride):
        out.append(grad_out.numel() * el)
    out.append(threads * 2 * qs * kvs * acc)
    if reduced:
        out.append(threads * 2 * qs * kvs * el)
    out.append(min(threads, q.shape[0] * q.shape[1]) * qs * acc)  # per-thread row sums
    return out


_FLASH_CPU_BWD = _BWD


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def cuda_flash_workspaces(func, args, kwargs=None) -> list[int]:
    """Byte sizes of FlashAttention-2's backward buffers (module docstring) for the CPU backward op the trace
    runs in its place, or [] for any other op (or a masked call)."""
    if func is not _FLASH_CPU_BWD or (kwargs or {}).get("attn_mask") is not None:
        return []
    q, k = args[1], args[2]  # (B, H, L, E)
    if q.dtype not in _REDUCED or q.shape[-1] > 256:  # not a call flash accepts (attention.kernel_for_call)
        return []
    b, heads, q_len, head = (int(s) for s in q.shape)
    kv_heads, kv_len = int(k.shape[1]), int(k.shape[2])
    q_rounded = _round_up(q_len, 128)
    head_rounded = _round_up(head, 32) if head <= 192 else 256
    out = [b * heads * q_rounded * 4, b * q_rounded * heads * head_rounded * 4]
    if kv_heads != heads:
        out += [b * kv_len * heads * head * q.element_size()] * 2
    return out
