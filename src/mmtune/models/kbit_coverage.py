"""What a k-bit base (qlora / lora8bit) leaves unquantized inside the decoder.

Every k-bit path (models/quantize.py) quantizes the decoder's nn.Linear layers, as bitsandbytes does. A mixture
of experts in transformers 5 (Qwen3-MoE, Qwen2-MoE, Mixtral, OLMoE, Qwen3-Omni's thinker) stores each layer's
experts as fused 3-D parameters (`mlp.experts.gate_up_proj`: experts x 2*inter x hidden), not nn.Linear, so
they stay in the compute dtype: in Qwen3-30B-A3B that is ~95 % of the weights, and its "QLoRA" base takes
~56 GiB where users expect a 4-bit 30B at ~17 GiB (bitsandbytes#1849, axolotl#3787). The memory is planned
right (the planner builds these same bytes); this names it, in the load decisions and in doctor MM228, so
nobody rents a GPU for a model four times smaller than the one that loads.
"""

from __future__ import annotations

import re


def kbit_left_out(model, family) -> tuple[list[str], int, int]:
    """(fused weight paths without block numbers, their bytes, the decoder's weight bytes) after quantization.

    A weight of 3 or more dimensions is a stack of matrices that no Linear-only quantizer reaches; packed
    4-bit / int8 storage is 1-D or 2-D. Bytes, not parameter counts: quantized weights are packed."""
    decoder = family.components.get("decoder", ())
    others = tuple(p for c, ps in family.components.items() if c != "decoder" for p in ps)
    paths: list[str] = []
    left = total = 0
    for name, p in model.named_parameters():
        if not name.startswith(decoder) or name.startswith(others):
            continue
        size = p.numel() * p.element_size()
        total += size
        if p.dim() >= 3:
            left += size
            path = re.sub(r"\.\d+\.", ".*.", name)
            if path not in paths:
                paths.append(path)
    return paths, left, total


def size_text(n: int) -> str:
    """Bytes in the unit that shows them (a tiny twin's experts are KiB, a 30B's are GiB)."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def left_out_line(model, family, method: str, dtype) -> str | None:
    """The load decision naming the decoder weights a k-bit base left in the compute dtype; None when none."""
    paths, left, total = kbit_left_out(model, family)
    if not left:
        return None
    share = left / total if total else 0.0
    return (f"{method}: not quantized: {', '.join(paths)} ({size_text(left)} in {str(dtype).rpartition('.')[2]}, "
            f"{share:.0%} of the decoder's weight bytes): fused 3-D expert weights are not nn.Linear, and bitsandbytes "
            "quantizes nn.Linear layers only, so they stay in the compute dtype (doctor MM228)")
