"""Metrics of a mixture's eval set, per source, and the weighted mean `eval.best_metric` can use.

Each source is scored with its own benchmark's metrics (data/mixture.py FORMAT_METRICS, or the
source's `metrics`), reported as `<source>/<metric>`. `mixture/<metric>` is the mean of every source's
first metric weighted by the source's `weight` (1 when unset); it is named after that metric when
all sources share it, else `mixture/score`. Sources whose first metrics disagree on direction (e.g.
`mae` with `anls`) are a config error, since their mean would be meaningless.
"""

from __future__ import annotations


def _sources(cfg):
    return cfg.data.eval if isinstance(cfg.data.eval, list) else None


def mixture_key(cfg) -> str | None:
    from ..data.mixture import source_metrics

    sources = _sources(cfg)
    if not sources:
        return None
    firsts = {source_metrics(s, cfg.data, cfg.eval.metrics)[0] for s in sources}
    return f"mixture/{firsts.pop()}" if len(firsts) == 1 else "mixture/score"


def reported_metrics(cfg) -> set[str]:
    """Every metric name an evaluation of this config reports (eval_loss alone when eval.generate=false:
    every other metric scores generated answers)."""
    from ..data.mixture import source_metrics

    if not cfg.eval.generate:
        return {"eval_loss"}
    sources = _sources(cfg)
    if not sources:
        names = set(cfg.eval.metrics)
        return names | ({"unparsable"} if names & {"mae", "rmse"} else set()) | {"eval_loss"}
    names = {"eval_loss", mixture_key(cfg)}
    for s in sources:
        ms = source_metrics(s, cfg.data, cfg.eval.metrics)
        names |= {f"{s.name}/{m}" for m in ms}
        if set(ms) & {"mae", "rmse"}:
            names.add(f"{s.name}/unparsable")
    return names


def first_metrics(cfg) -> dict[str, str]:
    """Each eval source's first metric (what mixture/<metric> averages); {} without a mixture."""
    from ..data.mixture import source_metrics

    return {s.name: source_metrics(s, cfg.data, cfg.eval.metrics)[0] for s in _sources(cfg) or ()}


def check_directions(cfg) -> None:
    from ..errors import ConfigError
    from .metrics import greater_is_better

    firsts = first_metrics(cfg)
    if not firsts:
        return
    if len({greater_is_better(m) for m in firsts.values()}) > 1:
        raise ConfigError("the mixture's sources are scored in opposite directions: "
                          + ", ".join(f"{k} by {v}" for k, v in firsts.items()), where="data.eval",
                          fix="give the sources metrics that agree (e.g. metrics: [exact_match] first), "
                              "or evaluate them in separate runs")


def per_source_metrics(cfg, records, answers: list[str], refs: list[list[str]]) -> dict[str, float]:
    from ..data.mixture import source_metrics
    from . import metrics as M

    check_directions(cfg)
    out: dict[str, float] = {}
    firsts, weights = [], []
    for s in _sources(cfg):
        idx = [i for i, r in enumerate(records) if r.origin == s.name]
        if not idx:
            continue
        names = source_metrics(s, cfg.data, cfg.eval.metrics)
        scores = M.compute(names, [answers[i] for i in idx], [refs[i] for i in idx])
        out.update({f"{s.name}/{k}": v for k, v in scores.items()})
        firsts.append(scores[names[0]])
        weights.append(s.weight if s.weight is not None else 1.0)
    if firsts:
        out[mixture_key(cfg)] = sum(w * x for w, x in zip(weights, firsts)) / sum(weights)
    return out
