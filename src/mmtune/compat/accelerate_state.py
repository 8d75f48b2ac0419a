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


__all__ = ["reset_accelerate_state"]
