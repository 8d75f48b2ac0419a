"""Private torch utilities the planner uses outside FakeTensorMode itself.

Checked on torch 2.13 (CPU build) and 2.14.1 (CUDA build on a CPU-only machine); the GPU machines' 2.11
could not be installed here (no CPU wheel of it on this machine's index), so it is covered only by these names existing since 2.4.
Each name is resolved at import of this module (the planner imports it, nothing at `import mmtune`),
and a missing one is a CompatError naming torch's version and the planner, not an AttributeError.
"""

from __future__ import annotations

import torch

from . import need, need_attr

_FEATURE = "planner (fake-tensor execution of the training step)"

# torch.utils._pytree: flatten/map nested (args, kwargs) of aten calls and of transformers caches.
# Private but stable since torch 2.0; torch.utils.pytree (public) only appeared as an alias later.
tree_flatten = need("torch.utils._pytree", "tree_flatten", "torch", _FEATURE)
tree_unflatten = need("torch.utils._pytree", "tree_unflatten", "torch", _FEATURE)
tree_leaves = need("torch.utils._pytree", "tree_leaves", "torch", _FEATURE)
tree_map = need("torch.utils._pytree", "tree_map", "torch", _FEATURE)

# torch.utils._python_dispatch.TorchDispatchMode: the base of the planner's storage tracker (every aten
# op an observed step runs). The documented way to write a dispatch mode, in a private module.
TorchDispatchMode = need("torch.utils._python_dispatch", "TorchDispatchMode", "torch", _FEATURE)

# torch.utils._mode_utils.no_dispatch: run an op for real (no modes) inside the fake mode, for the small
# integer tensors that steer control flow (ids, masks, grids).
no_dispatch = need("torch.utils._mode_utils", "no_dispatch", "torch", _FEATURE)

# torch._prims_common.suggest_memory_format: the memory format FakeTensorMode's cache key records for
# 4-D/5-D tensors; the planner's fast cache key must record the same.
suggest_memory_format = need("torch._prims_common", "suggest_memory_format", "torch", _FEATURE)

# torch.utils.flop_counter.flop_registry (not in the module's __all__): FLOPs of matmul/attention ops for
# the step-time roofline.
flop_registry = need("torch.utils.flop_counter", "flop_registry", "torch", _FEATURE)


_graph_task_id = need_attr(torch._C, "_current_graph_task_id", "torch", _FEATURE)


def in_autograd_backward() -> bool:
    """True while the autograd engine runs a backward pass (`torch._C._current_graph_task_id() != -1`).

    The planner attributes every op the engine runs (recomputation under checkpointing included) to the
    backward phase, whatever phase the caller set; there is no public "am I inside backward" query.
    Checked on torch 2.13, 2.14.
    """
    return _graph_task_id() != -1


def private_aten(name: str):
    """`torch.ops.aten.<name>` for an underscore-named (internal) aten op, e.g. `_unsafe_view`.

    The planner names a few internal ops: views it treats as free (`_unsafe_view`), the scalar read it
    answers (`_local_scalar_dense`), index ops it rewrites (`_unsafe_index`, `_unsafe_index_put`) and
    the CPU flash-attention kernels whose scratch memory it models. Checked on torch 2.13, 2.14.
    """
    ops = torch.ops.aten
    try:
        return getattr(ops, name)
    except (AttributeError, RuntimeError):
        from . import broken

        raise broken("torch", _FEATURE, f"the aten operator {name}") from None


def cpu_allocator_peak(run) -> int:
    """The CPU allocator's peak bytes above what was live before, while `run()` runs.

    torch.profiler with `profile_memory=True` records one "[memory]" event per allocation and free; the
    public views of them (`events()`, `key_averages()`) only sum them per op, so the running sum comes
    from the raw kineto results (`profile.profiler.kineto_results`, undocumented), in time order. Used
    by the planner's accuracy measurement (plan/measure.py) and `plan --verify` on a CPU. Checked on
    torch 2.13, 2.14.
    """
    import gc

    from torch.profiler import ProfilerActivity, profile

    # The allocator's events are the whole process's: a garbage collection during `run()` frees tensors of
    # earlier, unrelated objects (cycles from earlier work), which the running sum would count against the
    # step. Collect first and hold the collector off while measuring, so the figure is the step's alone.
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            run()
    finally:
        if enabled:
            gc.enable()
    results = getattr(prof.profiler, "kineto_results", None)
    if results is None:
        from . import broken

        raise broken("torch", _FEATURE, "torch.profiler's kineto_results (the allocator's memory events)")
    events = sorted((e for e in results.events() if e.name() == "[memory]"
                     and e.device_type() == torch.autograd.DeviceType.CPU), key=lambda e: e.start_ns())
    cur = peak = 0
    for e in events:
        cur += e.nbytes()
        peak = max(peak, cur)
    return peak


__all__ = ["tree_flatten", "tree_unflatten", "tree_leaves", "tree_map", "TorchDispatchMode", "no_dispatch",
           "suggest_memory_format", "flop_registry", "in_autograd_backward", "private_aten", "cpu_allocator_peak"]
