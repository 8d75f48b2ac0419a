"""A storage-exact stand-in for bitsandbytes `Linear8bitLt` (LLM.int8()), used in plans only.

What bnb holds for one layer: the int8 weight (1 byte per element, row-major) and one fp32 absmax scale per
output row (`SCB`, kept beside the parameter, not in it). What one training step of it allocates depends on
where it runs (bitsandbytes 0.45-0.50, `bnb.autograd._functions`):

- CUDA (`MatMul8bitLt`): the input cast to fp16 and quantized row-wise to int8 (`CA`, an fp32 scale per
  row), an int32 matmul result dequantized to the output; with `threshold > 0` the input columns holding
  an |activation| above it (outliers) are kept in 16 bits (`subA`) and multiplied in 16 bits. Saved for
  backward: the input and `subA`. Backward dequantizes the whole weight to the input's dtype (a temporary
  of out x in) for the input's gradient.
- CPU (`MatMul8bitFp`, bnb's training path there: no fast int8 kernels): the weight dequantized to the
  input's dtype and a 16/32-bit matmul, in forward and again in backward; no outlier split.

Which columns are outliers depends on the data: the plan counts `OUTLIER_FRACTION` of the input features
(LLM.int8()'s paper finds outliers in a handful of feature dimensions, ~0.1 % at 6.7B parameters; 1 % is a
margin on top of that), stated among the decisions. Subclassing nn.Linear lets peft wrap it with LoRA as
it wraps a linear layer.
"""

from __future__ import annotations

import math

import torch
from torch import nn

OUTLIER_FRACTION = 0.01  # share of input features planned as LLM.int8() outlier columns (CUDA, threshold > 0)


def int8_bytes(out_features: int, in_features: int) -> int:
    """Bytes bnb holds for an int8 weight: the int8 data + one fp32 scale per output row."""
    return out_features * in_features + 4 * out_features


class _Int8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, mod):
        out_f, in_f = mod.out_features, mod.in_features
        tokens = x.numel() // in_f
        ctx.mod = mod
        if mod.cuda_target:
            x16 = x if x.dtype == torch.float16 else torch.empty(x.shape, dtype=torch.float16, device=x.device)
            ca = torch.empty(tokens, in_f, dtype=torch.int8, device=x.device)  # row-wise int8 input
            sca = torch.empty(tokens, dtype=torch.float32, device=x.device)  # its row scales
            del x16
            acc = torch.empty(tokens, out_f, dtype=torch.int32, device=x.device)  # the int8 matmul's result
            del ca, sca, acc
            n_out = math.ceil(OUTLIER_FRACTION * in_f) if mod.threshold > 0 else 0
            sub = torch.empty(tokens, n_out, dtype=x.dtype, device=x.device)  # outlier columns, kept for backward
            w = torch.empty(out_f, in_f, dtype=x.dtype, device=x.device)  # stands for the int8 GEMM: FLOPs only
            ctx.held = (sub, x)  # bnb keeps the input and its outlier columns
        else:
            w = torch.empty(out_f, in_f, dtype=x.dtype, device=x.device)  # CB dequantized to the input's dtype
            ctx.held = (x,)  # bnb keeps the input (ctx.A)
        # Held as attributes, as bnb holds them (ctx.A, ctx.tensors), not through save_for_backward: activation
        # checkpointing's saved-tensor hooks never see them, so they stay alive until backward even in a
        # checkpointed block.
        return nn.functional.linear(x, w, bias.to(x.dtype) if bias is not None else None)

    @staticmethod
    def backward(ctx, grad):
        mod = ctx.mod  # ctx.held stays: bnb's ctx attributes live as long as the graph, past this backward
        w = torch.empty(mod.out_features, mod.in_features, dtype=grad.dtype, device=grad.device)  # dequantized CB
        return grad @ w, None, None, None


class PlannedLinear8bit(nn.Linear):
    """Planning stand-in of `bnb.nn.Linear8bitLt` with has_fp16_weights=False (see module docstring). On meta."""

    def __init__(self, in_features: int, out_features: int, bias: bool, compute_dtype, threshold: float,
                 cuda_target: bool):
        nn.Module.__init__(self)
        self.in_features, self.out_features = in_features, out_features
        self.threshold, self.cuda_target = threshold, cuda_target
        meta = torch.device("meta")
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=torch.int8, device=meta),
                                   requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features, dtype=compute_dtype, device=meta),
                                 requires_grad=False) if bias else None
        self.register_buffer("SCB", torch.empty(out_features, dtype=torch.float32, device=meta))

    def traffic(self, tokens: int, elem: int) -> tuple[int, int]:
        """(bytes read + written by the (de)quantization around one forward, and around one backward): the
        memory-bound kernels the stand-in allocates for but does not run (plan/dequant_cost.py prices them)."""
        out_f, in_f = self.out_features, self.in_features
        dequant = out_f * in_f * (1 + 2 * elem) + 4 * out_f  # int8 read, dequantized written, scaled in place
        if not self.cuda_target:
            return dequant, dequant
        quant_in = tokens * in_f * (elem + 1) + 4 * tokens  # input read, int8 + row scales written
        acc = 2 * 4 * tokens * out_f + tokens * out_f * elem  # int32 result written and read, output written
        return quant_in + acc, dequant

    def forward(self, x):
        return _Int8Linear.apply(x, self.weight, self.bias, self)


def replace_decoder_linears_int8(model, family, compute_dtype, threshold: float, cuda_target: bool) -> int:
    """Swap the decoder's nn.Linear layers for PlannedLinear8bit, as models.quantize.quantize_decoder_int8 does
    with bnb (the same selection: decoder linear layers only)."""
    from .quantize import decoder_linears

    targets = decoder_linears(model, family)
    for name, lin in targets:
        q = PlannedLinear8bit(lin.in_features, lin.out_features, lin.bias is not None, compute_dtype, threshold,
                              cuda_target)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, q)
    return len(targets)
