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
    if _BEFORE_DEEPSPEED:  # a DeepSpeed run wrote its type into the process state: the next run starts without
        partial = need("accelerate.state", "PartialState", "accelerate", _FEATURE)
        need_attr(partial, "_shared_state", "accelerate", _FEATURE)["distributed_type"] = _BEFORE_DEEPSPEED.pop()


# The process state's distributed type before a DeepSpeed Accelerator overwrote it (accelerate 1.15 copies
# AcceleratorState's DEEPSPEED into PartialState at the end of AcceleratorState.__init__); put back at reset.
_BEFORE_DEEPSPEED: list = []


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


def deepspeed_accelerator(cpu: bool, timeout=None, **kwargs):
    """An Accelerator running DeepSpeed (`deepspeed_plugin` in kwargs), also on CPU ranks.

    accelerate 1.15 turns DeepSpeed on only for `cpu=False`: with `cpu=True` it silently drops the plugin
    and runs plain DDP (MULTI_CPU). With `cpu=False` on a machine without a GPU it finds no device backend,
    lets DeepSpeed start the process group itself and then records 1 process and rank 0 on every rank
    (state.py: `backend is None` -> num_processes = 1), so every rank would act as the main one. Starting
    the process state first as the CPU one (`PartialState(cpu=True)`: gloo, the real world size and rank)
    and then asking for DeepSpeed gives the state DeepSpeed needs: AcceleratorState copies that
    process state and switches its type to DEEPSPEED (state.py, AcceleratorState.__init__); DeepSpeed
    adopts the existing gloo group (its CPU accelerator's backend without oneCCL).

    accelerate also leaves `ACCELERATE_USE_DEEPSPEED=true` in the environment once a plugin was given,
    which a later Accelerator in the same process (the next run of a test, `eval` after `train`) reads as
    "launched by accelerate with DeepSpeed" and turns DeepSpeed on from environment defaults; the
    variable is put back as it was. `timeout`: the process group's, given to the CPU group started here (on
    GPUs accelerate passes kwargs_handlers' InitProcessGroupKwargs to deepspeed.init_distributed).
    Checked on accelerate 1.15 with DeepSpeed 0.19.8 (CPU, gloo).
    """
    import os

    from accelerate import Accelerator, PartialState
    from accelerate.utils import DistributedType

    if cpu:  # the group is started here, so the process group's timeout (train.dist_timeout_minutes) too
        PartialState(cpu=True, **({"timeout": timeout} if timeout is not None else {}))
    before = os.environ.get("ACCELERATE_USE_DEEPSPEED")
    shared = need_attr(PartialState, "_shared_state", "accelerate", _FEATURE)  # read only: PartialState() would start it
    if shared:
        _BEFORE_DEEPSPEED[:] = [shared["distributed_type"]]
    try:
        accelerator = Accelerator(cpu=False, **kwargs)
    finally:
        if before is None:
            os.environ.pop("ACCELERATE_USE_DEEPSPEED", None)
        else:
            os.environ["ACCELERATE_USE_DEEPSPEED"] = before
    if accelerator.distributed_type != DistributedType.DEEPSPEED:
        from . import CompatError

        raise CompatError(f"accelerate did not turn DeepSpeed on (distributed type {accelerator.distributed_type})",
                          fix="pip install 'accelerate>=1.15', or train.strategy=ddp / fsdp")
    return accelerator


__all__ = ["deepspeed_accelerator", "enable_cpu_fp16", "reset_accelerate_state"]


def bare_optimizer(accelerator, optimizer):
    """The torch optimizer inside accelerate's `AcceleratedOptimizer` where the wrapper does nothing for the
    run: one process (no DDP, FSDP, DeepSpeed or XLA) and no GradScaler (fp16 keeps it: its step goes
    through the scaler). Else `optimizer` as it is.

    Why: on one process accelerate 1.15's `step` only checks, but asks `is_lomo_available()` twice a call
    (importlib's find_spec over sys.path: ~45 us idle, milliseconds when the disk is busy) and `zero_grad`
    reads the optimizer's signature (inspect) each call; the plain loop pays neither. The state dict is the
    inner optimizer's either way (checkpoints do not change), and `accelerator.clip_grad_norm_` has no
    scaler to unscale with. Checked on accelerate 1.15.
    """
    wrapped = need("accelerate.optimizer", "AcceleratedOptimizer", "accelerate", "the optimizer step")
    if not isinstance(optimizer, wrapped) or accelerator.distributed_type != "NO" \
            or getattr(optimizer, "scaler", None) is not None:
        return optimizer
    return need_attr(optimizer, "optimizer", "accelerate", "the optimizer step")


def unwrapped(accelerator, model):
    """`accelerator.unwrap_model(model)`, without asking accelerate where it wrapped nothing: one process
    (no DDP / FSDP / DeepSpeed engine) and no torch.compile wrapper (`_orig_mod`). accelerate 1.15's
    unwrap_model imports DeepSpeed (when installed) to test for its engine: ~24 MB of peak RSS, at the last
    step's checkpoint, on a run that never uses it. Checked on accelerate 1.15."""
    if accelerator.distributed_type == "NO" and not hasattr(model, "_orig_mod"):
        return model
    return accelerator.unwrap_model(model)
