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
    fix = None
    if not plan.fits:  # the smallest changes that make it fit, searched by the planner (plan/fixes.py)
        from ..pieces import plan_fix

        fix = plan_fix(ctx.need("cfg"), ctx.need("resolved"), plan, gpu)
    yield from fit_findings(plan, gpu, "train step", expandable=ctx.need("resolved").expandable_segments, fix=fix)


def fit_findings(plan, gpu, what: str, where: str = "train.micro_batch_size", expandable: bool = False, fix=None):
    """The process total (reserved + CUDA context + workspaces) against the GPU's memory, by the margin rule
    (plan/margin.py); `expandable`: the run's allocator already has expandable segments
    (resolve/decisions.decide_cuda_allocator); `fix`: plan/fixes.FixSearch, when one was made."""
    from ...plan.margin import verdict_line

    if not plan.fits:
        if fix is not None and fix.fix is not None:
            where = ", ".join(fix.fix.overrides)  # the keys the smallest fix changes
            text = (" ".join(fix.fix.lines) + f"  (the smallest change found: {_gib(fix.fix.result.process_total_bytes)} "
                    f"planned; {'; '.join(dict.fromkeys(fix.fix.notes))})")
        elif fix is not None:
            text = fix.why_none
        else:
            text = "`mmtune plan CONFIG --gpu NAME` searches the smallest changes that make it fit"
        yield error(f"the {what} does not fit: {verdict_line(plan)}", where=where, fix=text)
    elif not expandable and plan.margin_bytes < 2 * plan.required_margin_bytes:
        yield warning(f"the {what} fits ({verdict_line(plan)}), but fixed segments fragment over a run of varying "
                      "lengths and can push it over", where=where,
                      fix="unset PYTORCH_CUDA_ALLOC_CONF (mmtune then uses expandable_segments:True) or add "
                          "expandable_segments:True to it")
    else:
        yield info(f"the {what}: {verdict_line(plan)}", where=where)


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
