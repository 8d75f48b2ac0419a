"""accelerate's process-wide state singletons.

Checked on accelerate 1.15 (this machine and the GPU machines).
"""

from __future__ import annotations

from . import need, need_attr

_FEATURE = "a second run in one process (tests, eval after train)"


def reset_accelerate_state() -> None:
    """Forget accelerate's process-wide `AcceleratorState` and `GradientState` before building an Accelerator.

    accelerate keeps both as singletons; a second run in the same process would otherwise inherit the
    first run's mixed precision and gradient accumulation. The only reset is the private `_reset_state`
    (what accelerate's own tests use); the partial (process group) state is kept: re-initialising the
    process group is neither needed nor allowed. Checked on accelerate 1.15.
    """
    accelerator_state = need("accelerate.state", "AcceleratorState", "accelerate", _FEATURE)
    gradient_state = need("accelerate.state", "GradientState", "accelerate", _FEATURE)
    need_attr(accelerator_state, "_reset_state", "accelerate", _FEATURE)(reset_partial_state=False)
    need_attr(gradient_state, "_reset_state", "accelerate", _FEATURE)()


def enable_cpu_fp16(accelerator) -> None:
    """fp16 autocast + loss scaling on the CPU, which accelerate leaves off.

    accelerate 1.15 turns its fp16 path (`native_amp`, a `GradScaler`) on only for GPU-type devices; on the
    CPU an fp16 Accelerator silently runs without autocast or scaling. torch itself has both on the CPU
    (`torch.autocast("cpu", dtype=torch.float16)`, `torch.amp.GradScaler("cpu")`; checked on torch 2.13),
    so this sets the two attributes accelerate's own fp16 branch sets. From then on accelerate's code path
    is the GPU one: `autocast()` and the prepared model's forward autocast to fp16 on the CPU,
    `backward` scales the loss, `clip_grad_norm_` unscales first, the prepared optimizer steps through the
    scaler and reports skipped steps. Call it before `prepare`. Checked on accelerate 1.15.
    """
    import torch

    if accelerator.device.type != "cpu" or accelerator.mixed_precision != "fp16":
        return
    if not hasattr(accelerator, "native_amp") or not hasattr(accelerator, "scaler"):
        from . import CompatError

        raise CompatError("accelerate's Accelerator has no `native_amp` / `scaler` attributes: fp16 on the CPU "
                          "needs accelerate's fp16 path (checked on accelerate 1.15)",
                          fix="pip install 'accelerate>=1.15', or train.precision=fp32 / bf16 on the CPU")
    accelerator.native_amp = True
    accelerator.scaler = torch.amp.GradScaler("cpu")


__all__ = ["enable_cpu_fp16", "reset_accelerate_state"]
