"""Tensor names of a checkpoint on disk, read from the safetensors headers only (no tensor data).

Two ways a checkpoint's names leave weights at random when transformers loads it, both only logged by
transformers ("Some weights of the model checkpoint were not used" / "newly initialized"):
- a training wrapper's state dict saved as is: every name under `module.` (DDP, DeepSpeed's engine),
  `_orig_mod.` (torch.compile) or `_fsdp_wrapped_module.` (FSDP1), so no name matches the model class;
- a stack of layers with a hole: `layers.0-5` and `layers.7-27` (a partial save or a hand-made merge).
The load itself (models/load_report.py) refuses any weight left at random; these are what the doctor can say
from the headers, in seconds, before a GPU is rented.
"""

from __future__ import annotations

import re
from pathlib import Path

WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")
_LAYER = re.compile(r"^(.*?\b(?:layers|blocks|h))\.(\d+)\.")


def checkpoint_keys(folder: Path) -> list[str]:
    """Every tensor name of the folder's *.safetensors files (headers only)."""
    from safetensors import safe_open

    keys: list[str] = []
    for shard in sorted(folder.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            keys.extend(f.keys())
    return keys


def wrapper_prefix(keys: list[str]) -> str | None:
    """The training wrapper's prefix every name starts with, or None."""
    for p in WRAPPER_PREFIXES:
        if keys and all(k.startswith(p) for k in keys):
            return p
    return None


def layer_holes(keys: list[str]) -> dict[str, list[int]]:
    """{stack name: layer indices missing between its first and last layer} for stacks with a hole."""
    seen: dict[str, set[int]] = {}
    for k in keys:
        m = _LAYER.match(k)
        if m:
            seen.setdefault(m.group(1), set()).add(int(m.group(2)))
    return {stack: sorted(set(range(max(idx) + 1)) - idx) for stack, idx in seen.items()
            if len(idx) != max(idx) + 1}
