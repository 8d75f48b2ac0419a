"""A storage-exact stand-in for bitsandbytes `Linear4bit`, used in plans only.

bitsandbytes quantizes a `Params4bit` when it first moves to a device, which needs real weights; a plan
has none. This module holds exactly what bnb stores for one NF4/FP4 layer (packed uint8 weight of
ceil(n/2) bytes; per-64-element absmax, itself 8-bit quantized with per-256-block fp32 constants and a
256-entry code when double quantization is on) and reproduces bnb's `MatMul4Bit` memory behaviour:
forward dequantizes the whole weight to the compute dtype as a temporary and keeps only the packed
weight for backward, which dequantizes it again to compute the input gradient. Subclassing nn.Linear
lets peft wrap it with LoRA exactly as it wraps a linear layer.
"""

from __future__ import annotations

import math

import torch
from torch import nn

BLOCKSIZE = 64  # bnb's default blocksize for 4-bit weights
NESTED_BLOCKSIZE = 256  # blocksize of the double-quantized absmax


def packed_4bit_bytes(numel: int, double_quant: bool = True) -> int:
    """Bytes bnb stores for a 4-bit weight of `numel` elements: packed data + quant state."""
    blocks = math.ceil(numel / BLOCKSIZE)
    data = (numel + 1) // 2
    if double_quant:
        state = blocks + 4 * math.ceil(blocks / NESTED_BLOCKSIZE) + 4 * 256 + 4  # uint8 absmax, fp32 absmax2, code, offset
    else:
        state = 4 * blocks
    return data + state + 4 * 16  # + the 16-entry NF4/FP4 code


class _Dequant4bitLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, packed, bias, out_features, in_features):
        w = torch.empty(out_features, in_features, dtype=x.dtype, device=x.device)  # dequantized weight
        ctx.save_for_backward(packed)
        ctx.shape = (out_features, in_features)
        ctx.has_bias = bias is not None
        return nn.functional.linear(x, w, bias.to(x.dtype) if bias is not None else None)

    @staticmethod
    def backward(ctx, grad):
        (packed,) = ctx.saved_tensors
        w = torch.empty(*ctx.shape, dtype=grad.dtype, device=grad.device)  # dequantized again
        return grad @ w, None, None, None, None


class PlannedLinear4bit(nn.Linear):
    """Planning stand-in of `bnb.nn.Linear4bit` (see module docstring). Built on `meta`."""

    def __init__(self, in_features: int, out_features: int, bias: bool, compute_dtype, double_quant: bool = True,
                 storage=torch.uint8):
        nn.Module.__init__(self)
        self.in_features, self.out_features = in_features, out_features
        self.compute_dtype = compute_dtype
        n = in_features * out_features
        blocks = math.ceil(n / BLOCKSIZE)
        meta = torch.device("meta")
        # bnb packs the 4-bit data into `storage` elements: ceil(n/2) bytes as uint8, or as fewer wider elements
        # (bf16 / fp32 under FSDP2, resolve/quantization.py), the same bytes
        per = torch.empty((), dtype=storage).element_size()
        self.weight = nn.Parameter(torch.empty((n + 1) // (2 * per), 1, dtype=storage, device=meta),
                                   requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features, dtype=compute_dtype, device=meta),
                                 requires_grad=False) if bias else None
        if double_quant:
            self.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8, device=meta))
            self.register_buffer("absmax2", torch.empty(math.ceil(blocks / NESTED_BLOCKSIZE), device=meta))
            self.register_buffer("code2", torch.empty(256, device=meta))
            self.register_buffer("offset", torch.empty((), device=meta))
        else:
            self.register_buffer("absmax", torch.empty(blocks, device=meta))
        self.register_buffer("code", torch.empty(16, device=meta))

    def forward(self, x):
        # As bnb.nn.Linear4bit.forward: the input cast to the compute dtype, the bias cast (in place, once)
        # to it, the output cast back to the input's dtype. With fp32 inputs (adapter.kbit_upcast: fp32
        # norms feed the layer) that is a 16-bit copy kept for backward and an fp32 output.
        inp_dtype = x.dtype
        x = x.to(self.compute_dtype)
        if self.bias is not None and self.bias.dtype != x.dtype:
            self.bias.data = self.bias.data.to(x.dtype)
        return _Dequant4bitLinear.apply(x, self.weight, self.bias, self.out_features, self.in_features).to(inp_dtype)


def replace_decoder_linears(model, family, compute_dtype, double_quant: bool = True, storage=torch.uint8) -> int:
    """Swap the decoder's nn.Linear layers for PlannedLinear4bit, as `quantize_decoder_4bit` does with bnb.

    Same selection rule as `mmtune.models.quantize.quantize_decoder_4bit`: decoder linear layers only;
    vision tower, audio encoder, projector and lm_head stay in the compute dtype.
    """
    decoder = family.components.get("decoder", ())
    others = tuple(p for c, ps in family.components.items() if c != "decoder" for p in ps)
    targets = [(n, m) for n, m in model.named_modules()
               if type(m) is nn.Linear and n.startswith(decoder) and not (n + ".").startswith(others)]
    for name, lin in targets:
        q = PlannedLinear4bit(lin.in_features, lin.out_features, lin.bias is not None, compute_dtype, double_quant,
                              storage)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, q)
    return len(targets)
