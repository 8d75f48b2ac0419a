"""Memory checks through the planner (`mmtune.plan.predict`): the train step, and eval batches.
Without the planner they are reported as not run, never guessed."""

from __future__ import annotations

from ..findings import error, info, warning
from ..registry import check


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


@check("MM001", "the planned step fits the target GPU", needs=("cfg", "gpu", "plan"), failure_mode=1)
def step_fits(ctx):
    plan, gpu = ctx.need("plan"), ctx.need("gpu")
    yield from fit_findings(plan, gpu, "train step")


def fit_findings(plan, gpu, what: str, where: str = "train.micro_batch_size"):
    """The process total (reserved + CUDA context + workspaces) against the GPU's memory."""
    peak = int(plan.process_total_bytes)
    cap = int(plan.gpu_total_bytes or gpu.memory_bytes)
    if not plan.fits or peak > cap:
        fix = "adapter.method=qlora, train.micro_batch_size=1, or a larger GPU (`mmtune plan --search` finds one)"
        yield error(f"the {what} needs {_gib(peak)} and {gpu.name} has {_gib(cap)}", where=where, fix=fix)
    elif peak > 0.9 * cap:
        yield warning(f"the {what} needs {_gib(peak)} of {gpu.name}'s {_gib(cap)} (over 90%): fragmentation "
                      "can push it over", where=where, fix="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    else:
        yield info(f"the {what} needs {_gib(peak)} of {gpu.name}'s {_gib(cap)}", where=where)


@check("MM003", "evaluation fits too (eval batch, generation)", needs=("cfg", "gpu", "plan"), failure_mode=3)
def eval_fits(ctx):
    cfg = ctx.need("cfg")
    if not cfg.data.eval or cfg.eval.batch_size <= cfg.train.micro_batch_size:
        return
    from ..pieces import build_plan

    ecfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"micro_batch_size": cfg.eval.batch_size})})
    yield from fit_findings(build_plan(ecfg, ctx.need("gpu")), ctx.need("gpu"),
                            f"eval batch of {cfg.eval.batch_size} (planned as a train step, an upper bound)",
                            where="eval.batch_size")
