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
The other is the im2col column buffer of a 2-D convolution ATen runs on its native CPU path
(`slow_conv2d`, aten/src/ATen/native/ConvolutionMM2d.cpp) rather than oneDNN: per batch
(C_in * kh * kw, out_h * out_w) elements, in forward and (for the weight gradient, and the input's) in backward;
a 1x1, stride-1, unpadded kernel needs none. ATen picks oneDNN (no such buffer here) by `use_mkldnn` in
aten/src/ATen/native/Convolution.cpp: fp32, and strided/dilated/batch >= 16/non-1x1/threads > 1, and (grouped,
or a kernel over 3x3, or batch > 1, or an input over 20,480 elements). Small single-channel inputs (a tiny audio
encoder's first conv: Phi-4-multimodal's NeMo subsampling) take the native path. A grouped (depthwise) conv on
oneDNN works in channel-blocked layouts (channels padded to the block: 16 on AVX-512, 8 below): it reorders the
input and the weight, writes a blocked output and reorders that into the returned tensor; the buffers come before
the output, so the step sees max(input' + weight' + output' - output, output') bytes more than the output
(forward only: a frozen tower's case; its backward is not modelled).
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
    if func is _CONV or func is _CONV_BWD:
        return _conv_columns(func, args, threads)
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


_CONV = torch.ops.aten.convolution.default
_CONV_BWD = torch.ops.aten.convolution_backward.default


def _uses_onednn(x, w, stride, dilation, groups, threads: int) -> bool:
    """ATen's `ConvParams::use_mkldnn` for a CPU fp32 (N, C, H, W) input (Convolution.cpp, torch 2.13)."""
    if not torch.backends.mkldnn.is_available() or not torch.backends.mkldnn.enabled:
        return False
    kh, kw = int(w.shape[-2]), int(w.shape[-1])
    strided, dilated = any(int(s) != 1 for s in stride), any(int(d) != 1 for d in dilation)
    n = int(x.shape[0])
    return ((strided or dilated or n >= 16 or kh != 1 or kw != 1 or threads > 1)
            and (groups > 1 or (kw > 3 and kh > 3) or n > 1 or x.numel() > 20480))


def _conv_columns(func, args, threads: int) -> list[int]:
    """slow_conv2d's im2col buffers (module docstring), or [] where ATen runs oneDNN or the conv is not 2-D fp32."""
    if func is _CONV:
        x, w, _, stride, padding, dilation, transposed, _, groups = args[:9]
    else:  # convolution_backward(grad_out, input, weight, bias_sizes, stride, padding, dilation, transposed, ..., mask)
        _, x, w, _, stride, padding, dilation, transposed, _, groups, mask = args[:11]
    if transposed or x.dim() != 4 or x.dtype != torch.float32:
        return []
    if _uses_onednn(x, w, stride, dilation, int(groups), threads):
        return _onednn_grouped(x, w, stride, padding, dilation, int(groups)) if func is _CONV else []
    if int(groups) != 1:
        return []
    kh, kw = int(w.shape[-2]), int(w.shape[-1])
    if kh == 1 and kw == 1 and all(int(s) == 1 for s in stride) and all(int(p) == 0 for p in padding):
        return []  # the input itself serves as the columns
    (sh, sw), (ph, pw), (dh, dw) = ([int(v) for v in t] for t in (stride, padding, dilation))
    out_h = (int(x.shape[2]) + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    out_w = (int(x.shape[3]) + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    cols = int(x.shape[0]) * int(x.shape[1]) * kh * kw * out_h * out_w * x.element_size()
    if func is _CONV:
        return [cols]
    # backward: the columns recomputed for the weight's gradient, and the input gradient's own columns
    return [cols] * (int(bool(mask[0])) + int(bool(mask[1])))


def _onednn_grouped(x, w, stride, padding, dilation, groups: int) -> list[int]:
    """oneDNN's blocked-layout buffers of a grouped conv's forward, as one scratch of the peak they add (docstring)."""
    if groups == 1:
        return []
    block = 16 if "AVX512" in torch.backends.cpu.get_cpu_capability() else 8
    pad = lambda c: -(-int(c) // block) * block  # noqa: E731
    kh, kw = int(w.shape[-2]), int(w.shape[-1])
    out_h = (int(x.shape[2]) + 2 * int(padding[0]) - int(dilation[0]) * (kh - 1) - 1) // int(stride[0]) + 1
    out_w = (int(x.shape[3]) + 2 * int(padding[1]) - int(dilation[1]) * (kw - 1) - 1) // int(stride[1]) + 1
    el, n = x.element_size(), int(x.shape[0])
    x_b = n * pad(x.shape[1]) * int(x.shape[2]) * int(x.shape[3]) * el
    w_b = pad(w.shape[0]) * int(w[0].numel()) * el
    out = n * int(w.shape[0]) * out_h * out_w * el
    out_b = n * pad(w.shape[0]) * out_h * out_w * el
    return [max(x_b + w_b + out_b - out, out_b)]


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
