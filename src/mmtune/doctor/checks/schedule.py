"""Schedule checks: warmup, evaluation and saving intervals against the run's length (fast, config only;
MM473 also reads the data scan's eval record count).

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


@check("MM473", "evaluation during training reads no more records than training does", needs=("cfg", "scan", "resolved"))
def eval_work(ctx):
    """Every evaluation reads the whole eval set (data.eval_max_samples caps it), and with generation each record
    is also answered token by token, up to eval.max_new_tokens forwards. An eval set evaluated more often than
    training reads records makes evaluation the run's longest part, silently (a warning with the counts: how
    long one evaluation takes is known only once it runs). Per process: both are shared over the ranks."""
    cfg, scan, resolved = ctx.need("cfg"), ctx.need("scan"), ctx.need("resolved")
    t = resolved.cfg.train  # train.epochs: the resolved run's steps
    if cfg.data.eval is None or not t.max_steps:
        return
    n = sum(s.ok for s in scan.splits if s.split == "eval")
    n = min(n, cfg.data.eval_max_samples or n)
    every = cfg.eval.every or t.max_steps
    runs = -(-t.max_steps // every)  # at each multiple of eval.every and at the last step
    world = max(1, resolved.target.processes)
    evaluated = runs * -(-n // world)
    trained = t.max_steps * t.micro_batch_size * t.grad_accum
    if not n or evaluated <= trained:
        return
    keep = max(1, trained * world // runs)
    gen = (f", each answered by greedy generation of up to {cfg.eval.max_new_tokens} tokens one forward at a time"
           if cfg.eval.generate and cfg.eval.metrics else "")
    yield warning(f"evaluation reads {evaluated} records per process over the run ({runs} evaluation(s) of {n} records"
                  f"{gen}), training {trained}: evaluation, not training, takes most of the run",
                  where="data.eval_max_samples" if n > keep else "eval.every",
                  fix=f"data.eval_max_samples={keep} (evaluate a sample), a larger eval.every, or eval.generate=false "
                      "during training and `mmtune eval` on the best checkpoint after")
