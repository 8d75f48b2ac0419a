"""What the launch environment says that the config does not, put into the resolved run's decisions.

- `CUDA_VISIBLE_DEVICES` set to an empty string (or -1), as job schedulers do on a node without a GPU allocation and
  scripts do to force the CPU, hides every GPU from torch, and an id past the machine's GPUs (`=1` on a one-GPU
  machine) hides them as well. A run with `train.device=auto` then trains on the CPU; the target names the variable,
  so the reason is on the start screen, not found later from the step time.
- `ACCELERATE_MIXED_PRECISION` (`accelerate launch --mixed_precision`, or the accelerate config file's
  `mixed_precision`) is not what a run trains in: mmtune passes its own `train.precision` to accelerate, which
  overrides the launcher's. When the two differ, the precision decision says so.
"""

from __future__ import annotations

import os


def hidden_gpus_note() -> str | None:
    """A note naming CUDA_VISIBLE_DEVICES when it is set (call it when torch sees no GPU), else None."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    first = value.split(",")[0].strip()
    if first == "" or first.startswith("-"):
        return f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU"
    return f"CUDA_VISIBLE_DEVICES={value!r} leaves no GPU visible (ids count from 0: does this machine have GPU {first}?)"


_ACCELERATE = {"no": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}


def launcher_precision_note(precision: str) -> str | None:
    """A note when `accelerate launch` asked for another mixed precision than the run's `precision`, else None."""
    asked = os.environ.get("ACCELERATE_MIXED_PRECISION")
    if not asked or _ACCELERATE.get(asked.strip().lower(), asked) == precision:
        return None
    return (f"accelerate launch asked for mixed_precision={asked} (ACCELERATE_MIXED_PRECISION: --mixed_precision or "
            f"the accelerate config file), which the run's own precision overrides; "
            f"train.precision={_ACCELERATE.get(asked.strip().lower(), asked)} follows the launcher")
