"""What `eval.best_metric` can name and which way it improves: one answer for the config check at start
(resolve/run.py), the doctor's MM028 and the loop that keeps the best checkpoint (train/milestones.py).

Two ways a best checkpoint went wrong silently: a metric that is never computed (generation turned off:
`eval.generate=false` reports eval_loss alone, and the loop skipped the comparison every time, so no
checkpoint was ever "best"), and a direction that contradicts the metric (`eval.greater_is_better=true`
with eval_loss kept the checkpoint of the highest loss, as transformers' greater_is_better does).
"""

from __future__ import annotations


def generated_off(cfg) -> bool:
    """Evaluation scores no generated answer: only eval_loss is reported."""
    return not cfg.eval.generate


def metric_direction(cfg, name: str) -> bool | None:
    """True: higher is better; False: lower is better; None: a name whose direction is not known.

    `mixture/score` (a mixture whose sources' first metrics differ, e.g. wer and cer) goes the way those
    metrics go (they agree: evaluate/per_source.py check_directions), not "higher" for the word score."""
    from .metrics import LOWER_IS_BETTER, METRICS, greater_is_better
    from .per_source import first_metrics, mixture_key

    if name == mixture_key(cfg):
        firsts = first_metrics(cfg)
        return greater_is_better(next(iter(firsts.values()))) if firsts else None
    leaf = name.split("/")[-1]
    if leaf in LOWER_IS_BETTER:
        return False
    return True if leaf in METRICS else None


def best_is_higher(cfg) -> tuple[bool, str]:
    """(higher is better, why) for cfg.eval.best_metric; a requested direction that contradicts a metric
    whose direction is known is a ConfigError naming eval.greater_is_better."""
    from ..errors import ConfigError
    from .metrics import greater_is_better

    ev = cfg.eval
    known = metric_direction(cfg, ev.best_metric)
    if ev.greater_is_better is not None:
        if known is not None and known != ev.greater_is_better:
            way = "higher" if known else "lower"
            raise ConfigError(
                f"eval.greater_is_better={str(ev.greater_is_better).lower()} but {ev.best_metric} is better when {way}: "
                f"the checkpoint kept as best would be the worst one",
                where="eval.greater_is_better",
                fix=f"remove eval.greater_is_better (mmtune infers {str(known).lower()} from {ev.best_metric!r}), "
                    "or name the metric you meant in eval.best_metric")
        return ev.greater_is_better, "requested"
    g = known if known is not None else greater_is_better(ev.best_metric)
    return g, f"inferred from {ev.best_metric!r}"


def not_computed_reason(cfg) -> str:
    """Why the reported names are what they are, for the error naming eval.best_metric."""
    return "; eval.generate=false: no answers are generated, so no metric but eval_loss" if generated_off(cfg) else ""
