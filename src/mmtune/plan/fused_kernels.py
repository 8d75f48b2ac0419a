"""Liger-Kernel's RMSNorm and SwiGLU planned by torch twins (train.fused_kernels=liger).

A Triton kernel cannot run on fake tensors (nor on a CPU), so the planner swaps the modules Liger's
patch replaces (models/fused_kernels.liger_modules) for autograd Functions that compute the same values
in torch and hold exactly the memory Liger's Functions hold (liger_kernel/ops/*.py, liger-kernel 0.8.5):

- `LigerRMSNormFunction` (casting mode "llama", in_place=True): forward allocates Y (input dtype) and
  RSTD (fp32, one per row) and saves (X, W, RSTD); backward writes dX over dY and, when W trains, its
  gradient in W's dtype. Transformers' RMSNorm under bf16 instead saves an fp32 copy of X (pow and mul
  keep it) plus the fp32 rsqrt per row: per norm, rows x hidden x 2 bytes fewer kept with Liger under
  16-bit compute (the bf16 X it keeps instead of the fp32 copy), the same in fp32.
- `LigerSiLUMulFunction`: forward allocates c = silu(a) x b and saves (a, b) (gate and up outputs);
  backward writes da over a and db over b. Transformers' MLP also keeps silu(a) (the multiply saves
  it): rows x intermediate x dtype bytes fewer per decoder layer.
Inside a twin, torch's temporaries stand for what Triton keeps in registers: they are not counted
(`fused` runs them below the tracker, as nested ops), and the kernel's traffic is counted as one read
of its inputs and one write of its outputs for the time model.

Not planned, because they change no saved tensor: Liger's RoPE (in place on q / k, saves cos / sin,
which transformers' rotary function keeps as well) and LayerNorm (saves X, mean, rstd as torch's
native layer norm does). Liger's per-SM fp32 partial sums of a trained norm weight's gradient
(SMs x hidden x 4 bytes, transient) are not modelled either.
"""

from __future__ import annotations

import contextlib
from types import MethodType

import torch
import torch.nn.functional as F

from ..models.fused_kernels import liger_family, liger_modules


@contextlib.contextmanager
def fused(*tensors):
    """Ops run as one fused kernel: on the planner's fake tensors, below its storage tracker (their
    temporaries are registers), the kernel counted as one pass over `tensors` (inputs and outputs)."""
    mode = next((m for m in (getattr(t, "fake_mode", None) for t in tensors) if m is not None), None)
    tracker = getattr(mode, "tracker", None)
    with torch.autocast(tensors[0].device.type, enabled=False):  # Triton kernels ignore autocast
        if tracker is None:
            yield
            return
        mode._depth += 1  # ValueFakeMode: nested ops are not observed
        try:
            yield
        finally:
            mode._depth -= 1
    tracker.kernel_cost(sum(t.numel() * t.element_size() for t in tensors))


class RMSNormTwin(torch.autograd.Function):
    """LigerRMSNormFunction (casting_mode="llama", offset 0, in_place=True) in torch."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        shape = x.shape
        x2 = x.contiguous().view(-1, shape[-1])  # Liger's ensure_contiguous + view(-1, hidden)
        y = torch.empty_like(x2)
        rstd = torch.empty(x2.shape[0], dtype=torch.float32, device=x2.device)
        with fused(x2, weight, y, rstd):
            rstd.copy_(x2.float().pow(2).mean(-1).add(eps).rsqrt())
            # llama casting: only 1/rms in fp32; X * rstd cast back to X's dtype, then times W
            y.copy_((x2.float() * rstd[:, None]).to(x2.dtype) * weight)
        ctx.save_for_backward(x2, weight, rstd)
        return y.view(shape)

    @staticmethod
    def backward(ctx, dy):
        x2, weight, rstd = ctx.saved_tensors
        dy2 = dy.contiguous().view(-1, x2.shape[-1])
        dw = torch.empty_like(weight) if ctx.needs_input_grad[1] else None
        with fused(*(t for t in (dy2, x2, weight, rstd, dw) if t is not None)):
            xhat = x2.float() * rstd[:, None]
            if dw is not None:
                dw.copy_((dy2.float() * xhat.to(x2.dtype)).sum(0))
            m = dy2.float() * weight.float()
            dy2.copy_(rstd[:, None] * (m - xhat * (m * xhat).mean(-1, keepdim=True)))  # dX over dY
        return dy2.view(dy.shape), dw, None


class SiLUMulTwin(torch.autograd.Function):
    """LigerSiLUMulFunction in torch: c = silu(a) * b, saving only a and b."""

    @staticmethod
    def forward(ctx, a, b):
        a, b = a.contiguous(), b.contiguous()
        c = torch.empty_like(a)
        with fused(a, b, c):
            c.copy_(F.silu(a.float()).to(b.dtype) * b)
        ctx.save_for_backward(a, b)
        return c

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensors
        dc = dc.contiguous()
        with fused(dc, a, b):
            af, dcf = a.float(), dc.float()
            sig = torch.sigmoid(af)
            silu = af * sig
            da = dcf * (silu * (1 - sig) + sig) * b.float()
            b.copy_(dcf * silu)  # Liger writes db over b and da over a
            a.copy_(da)
        return a, b


def _rms_norm_forward(self, hidden_states):
    eps = getattr(self, "variance_epsilon", None) or getattr(self, "eps", None) or 1e-6
    return RMSNormTwin.apply(hidden_states, self.weight, eps)


def _swiglu_forward(self, x):
    return self.down_proj(SiLUMulTwin.apply(self.gate_proj(x), self.up_proj(x)))


def apply_twins(model, family) -> list[str]:
    """Rebind the forward of every module Liger's patch would replace to its twin; the plan's decision lines."""
    patch = liger_family(family)
    if patch is None:
        return []
    n = {"rms_norm": 0, "swiglu": 0}
    for _, (kind, mod) in liger_modules(model, patch).items():
        if kind == "rms_norm" and getattr(mod, "weight", None) is not None:
            mod.forward = MethodType(_rms_norm_forward, mod)
        elif kind == "swiglu" and getattr(getattr(mod, "config", None), "hidden_act", "silu") in ("silu", "swish"):
            mod.forward = MethodType(_swiglu_forward, mod)
        else:
            continue  # LayerNorm: same saved tensors as torch's (module docstring)
        n[kind] += 1
    return [f"fused kernels: Liger planned by torch twins holding what its Functions hold (plan/fused_kernels.py): "
            f"{n['rms_norm']} RMSNorm (saves X in its dtype + fp32 1/rms per row, dX over dY), {n['swiglu']} SwiGLU "
            "(saves gate and up outputs, not silu(gate); gradients over them); RoPE and LayerNorm keep the same "
            "tensors as transformers' and are traced unpatched"]
