"""The time cost of bitsandbytes' 4-bit dequantisation, recorded as the traced step runs.

bnb's `MatMul4Bit` dequantizes each NF4 weight to the compute dtype before its matmul, in forward and
again in backward (for the input's gradient), and once more in a checkpointed layer's recomputation.
The plan's stand-in (`models/packed4bit.PlannedLinear4bit`) allocates that dequantized weight as bnb does
but runs no kernel for it, so without this the step-time model gave QLoRA LoRA's time. Each dequantize is
memory-bound; its bytes (bnb's `dequantize_4bit` with double quantization: the uint8 absmax blocks read
and expanded to fp32 first, then the packed weight read and the 16-bit weight written) join the traced
op costs with the phase "dequant", so they are priced on the GPU's bandwidth like any other op (and the
layer_dedup copies carry them).

bnb's int8 layers (lora8bit, models/packed8bit.PlannedLinear8bit) add theirs the same way: on CUDA the input's
row-wise int8 quantization and the int32 result's dequantization around each forward, the weight's
dequantization for the input gradient in backward; on a CPU the weight's dequantization in both.
"""

from __future__ import annotations

import math

BLOCKSIZE = 64  # bnb's 4-bit blocksize (models/packed4bit.py)
NESTED_BLOCKSIZE = 256


def dequant_bytes(numel: int, out_elem_size: int, double_quant: bool = True) -> int:
    """Bytes one dequantize of a 4-bit weight of `numel` elements reads and writes."""
    blocks = math.ceil(numel / BLOCKSIZE)
    packed = (numel + 1) // 2
    if double_quant:
        # absmax: uint8 codes + fp32 second-level absmax read, fp32 absmax written, then read back
        state = blocks + 4 * math.ceil(blocks / NESTED_BLOCKSIZE) + 4 * blocks + 4 * blocks
    else:
        state = 4 * blocks
    return packed + state + numel * out_elem_size


def dequant_cost_hooks(model, tracker) -> list:
    """Hooks that append one "dequant" cost per dequantize of every 4-bit linear (while costs are recorded)."""
    from ..compat.torch_internals import in_autograd_backward

    handles = []
    for mod in model.modules():
        if type(mod).__name__ == "PlannedLinear8bit":
            handles.append(mod.register_forward_hook(_int8_hook(tracker)))
            continue
        if type(mod).__name__ != "PlannedLinear4bit":
            continue
        numel = mod.in_features * mod.out_features
        double = hasattr(mod, "absmax2")

        def add(nbytes):
            if tracker.record_costs:
                tracker.trace.costs.append((0, nbytes, "dequant"))

        def hook(m, args, out, numel=numel, double=double):
            nbytes = dequant_bytes(numel, out.element_size(), double)
            add(nbytes)
            if out.requires_grad and not in_autograd_backward():  # backward dequantizes again (input grad)
                out.register_hook(lambda grad: add(nbytes))
        handles.append(mod.register_forward_hook(hook))
    return handles


def _int8_hook(tracker):
    """The forward hook of one int8 layer: its forward traffic now, its backward traffic when the output's
    gradient arrives (PlannedLinear8bit.traffic)."""
    from ..compat.torch_internals import in_autograd_backward

    def add(nbytes):
        if tracker.record_costs:
            tracker.trace.costs.append((0, nbytes, "dequant"))

    def hook(m, args, out):
        fwd, bwd = m.traffic(args[0].numel() // m.in_features, args[0].element_size())
        add(fwd)
        if out.requires_grad and not in_autograd_backward():
            out.register_hook(lambda grad: add(bwd))
    return hook
