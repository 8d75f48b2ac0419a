"""Schedule checks: warmup, evaluation and saving intervals against the run's length (fast, config only).

What `train/schedule.py` and `train/loop.py` do decides what is wrong here. The LR warms up linearly
over `train.warmup_steps`, then decays (cosine / linear) over exactly the remaining steps, to zero at
`train.max_steps`: a decay cannot reach zero before the end, so there is no check for it. Warmup as long
longer than the run never reaches `train.lr` (an error); as long as the run, it reaches it only at
the last step and never decays (a warning; one step with one warmup step is fine). The loop evaluates at multiples of `eval.every`
and checkpoints at multiples of `eval.every` / `train.save_every`, always at the last step too: an
interval longer than the run only ever triggers at the end.
"""

from __future__ import annotations

from ..findings import error, warning
from ..registry import check


@check("MM035", "warmup, evaluation and saving intervals fit train.max_steps", fast=True)
def schedule(ctx):
    t = ctx.need("cfg").train
    if t.max_steps is None or t.warmup_steps is None:  # train.epochs / warmup_ratio: the resolved run's steps
        t = ctx.need("resolved").cfg.train
    e = ctx.need("cfg").eval
    steps = t.max_steps
    decay = "" if t.scheduler == "constant" else f" and the {t.scheduler} decay never runs"
    if t.warmup_steps > steps:
        yield error(f"train.warmup_steps={t.warmup_steps} > train.max_steps={steps}: the whole run is warmup; the "
                    f"LR never reaches train.lr={t.lr:g} (it peaks at {steps / t.warmup_steps:.0%} of it){decay}",
                    where="train.warmup_steps", fix=f"train.warmup_steps={steps // 10}")
    elif t.warmup_steps == steps > 1:
        # Not an error: the last step runs at train.lr; but the run is all ramp, which is rarely meant.
        yield warning(f"train.warmup_steps={t.warmup_steps} = train.max_steps: the whole run is warmup; train.lr "
                      f"is reached only at the last step{decay}", where="train.warmup_steps",
                      fix=f"train.warmup_steps={steps // 10}")
    if e.every is not None and e.every > steps:
        yield warning(f"eval.every={e.every} > train.max_steps={steps}: evaluation (and the best checkpoint it "
                      "picks) runs only once, at the end", where="eval.every", fix=f"eval.every={max(1, steps // 4)}")
    if t.save_every is not None and t.save_every > steps:
        yield warning(f"train.save_every={t.save_every} > train.max_steps={steps}: the only checkpoint is the final "
                      "one, so a run stopped before the end has nothing to resume from", where="train.save_every",
                      fix=f"train.save_every={max(1, steps // 4)}")
