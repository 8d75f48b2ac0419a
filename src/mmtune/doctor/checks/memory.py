"""Memory checks through the planner (`mmtune.plan.predict`): the train step, and eval batches.
Without the planner they are reported as not run, never guessed."""

from __future__ import annotations

from ..findings import error, info, warning
from ..registry import check


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


@check("MM001", "the planned step fits the target GPU", needs=("cfg", "gpu", "plan", "resolved"), failure_mode=1)
def step_fits(ctx):
    plan, gpu = ctx.need("plan"), ctx.need("gpu")
    yield from fit_findings(plan, gpu, "train step", expandable=ctx.need("resolved").expandable_segments)


def fit_findings(plan, gpu, what: str, where: str = "train.micro_batch_size", expandable: bool = False):
    """The process total (reserved + CUDA context + workspaces) against the GPU's memory (`expandable`: the
    run's allocator already has expandable segments, resolve/decisions.decide_cuda_allocator)."""
    peak = int(plan.process_total_bytes)
    cap = int(plan.gpu_total_bytes or gpu.memory_bytes)
    if not plan.fits or peak > cap:
        fix = "adapter.method=qlora, train.micro_batch_size=1, or a larger GPU (`mmtune plan --search` finds one)"
        yield error(f"the {what} needs {_gib(peak)} and {gpu.name} has {_gib(cap)}", where=where, fix=fix)
    elif peak > 0.9 * cap:
        fix = ("leave headroom: a smaller train.micro_batch_size (with train.grad_accum up), or "
               "model.gradient_checkpointing=true" if expandable else
               "unset PYTORCH_CUDA_ALLOC_CONF (mmtune then uses expandable_segments:True) or add expandable_segments:True to it")
        yield warning(f"the {what} needs {_gib(peak)} of {gpu.name}'s {_gib(cap)} (over 90%): "
                      + ("the CUDA context, kernels' workspaces and other processes" if expandable else
                         "fragmentation of fixed segments") + " can push it over", where=where, fix=fix)
    else:
        yield info(f"the {what} needs {_gib(peak)} of {gpu.name}'s {_gib(cap)}", where=where)


@check("MM003", "evaluation fits too (eval batch, generation)", needs=("cfg", "gpu", "plan", "resolved"),
       failure_mode=3)
def eval_fits(ctx):
    """The plan traces the eval phases (eval loss, generation) when data.eval is set (plan/execute.run_eval)."""
    cfg = ctx.need("cfg")
    if not cfg.data.eval:
        return
    plan, gpu = ctx.need("plan"), ctx.need("gpu")
    ev = getattr(plan, "eval", None) or {}
    if not ev:
        return
    what = (f"evaluation ({ev['batch_size']} x {ev['prompt_tokens']}-token eval batch, "
            f"{ev['max_new_tokens']} generated tokens)")
    if str(plan.peak_phase).startswith("eval"):
        yield from fit_findings(plan, gpu, what, where="eval.batch_size",
                                expandable=ctx.need("resolved").expandable_segments)
    else:
        yield info(f"the {what} peaks at {_gib(ev['tensor_peak_bytes'])} of live tensors, below the train step",
                   where="eval.batch_size")
