"""Mixtures: data.train as a list of sources (published look-alikes), deterministic sampling, per-source
eval sets and metrics."""

from __future__ import annotations

import pytest

from mmtune.config.schema import DataConfig, RunConfig
from mmtune.data.sources import load_records

from .test_published import published  # noqa: F401  (the look-alike datasets fixture)


def sources(root, **chart):
    return [{"path": str(root / "chartqa" / "ChartQA Dataset"), "format": "chartqa", **chart},
            {"path": str(root / "infovqa"), "format": "infovqa"},
            {"path": str(root / "ocrvqa" / "dataset.json"), "format": "ocrvqa", "samples": 5}]


def test_sources_are_named_and_evaluated_on_their_own_eval_splits(published):  # noqa: F811
    d = DataConfig(train=sources(published))
    assert [s.name for s in d.train] == ["chartqa", "infovqa", "ocrvqa"]
    assert [s.name for s in d.eval] == ["chartqa", "infovqa", "ocrvqa"]
    d = DataConfig(train=[*sources(published), {"path": "x.jsonl", "format": "chartqa", "eval": False}])
    assert [s.name for s in d.train] == ["chartqa_0", "infovqa", "ocrvqa", "chartqa_3"]
    assert [s.name for s in d.eval] == ["chartqa_0", "infovqa", "ocrvqa"]
    # Round-trips through a dump (smoke runs re-validate the config).
    assert DataConfig.model_validate(d.model_dump()) == d


@pytest.mark.parametrize("bad, msg", [
    ([{"path": "a", "weight": 1, "samples": 2}], "not both"),
    ([{"path": "a", "name": "x"}, {"path": "b", "name": "x"}], "unique"),
    ([], "empty"),
])
def test_bad_mixtures_are_config_errors(bad, msg):
    with pytest.raises(ValueError, match=msg):
        DataConfig(train=bad)


def test_counts_per_source_samples_weights_and_as_is(published):  # noqa: F811
    # chartqa as is (12 train records), infovqa as is (6), ocrvqa exactly 5 of its 18.
    rs = load_records(DataConfig(train=sources(published)).train, DataConfig(), "train")
    by = {}
    for r in rs:
        by[r.origin] = by.get(r.origin, 0) + 1
    assert by == {"chartqa": 12, "infovqa": 6, "ocrvqa": 5}
    assert any("ocrvqa 5 of 18" in n for n in rs.notes)
    # Weights share data.mixture_size: 3:1 of 40 -> 30 chartqa (2.5 copies), 10 infovqa.
    src = [{**s, "weight": w} for s, w in zip(sources(published)[:2], (3, 1))]
    cfg = DataConfig(train=src, mixture_size=40)
    rs = load_records(cfg.train, cfg, "train")
    ids = [r.id for r in rs if r.origin == "chartqa"]
    assert len(ids) == 30 and len([r for r in rs if r.origin == "infovqa"]) == 10
    assert all(ids.count(i) in (2, 3) for i in set(ids)) and len(set(ids)) == 12


def test_weights_near_floats_limit_share_as_any_weights_and_infinite_ones_are_refused(published):  # noqa: F811
    """A weight of 1e308 beside a weight of 1e308 / 3 (found by the fuzzer, seed 0: tests/data/fuzz_objectives.py's
    mixtures): count x weight overflowed to inf and round(inf) raised OverflowError while loading; the shares are
    now taken from weights scaled to at most 1, so they split 3:1 as 3 and 1 do. An infinite weight is a config error."""
    src = [{**s, "weight": w} for s, w in zip(sources(published)[:2], (1e308, 1e308 / 3))]
    cfg = DataConfig(train=src, mixture_size=40)
    rs = load_records(cfg.train, cfg, "train")
    assert len([r for r in rs if r.origin == "chartqa"]) == 30 and len([r for r in rs if r.origin == "infovqa"]) == 10
    with pytest.raises(ValueError, match="finite"):
        DataConfig(train=[{**sources(published)[0], "weight": float("inf")}])


def test_sampling_is_deterministic_and_seeded(published):  # noqa: F811
    cfg = DataConfig(train=sources(published))
    a = [r.id for r in load_records(cfg.train, cfg, "train")]
    b = [r.id for r in load_records(cfg.train, cfg, "train")]
    assert a == b
    other = cfg.model_copy(update={"mixture_seed": 7})
    c = [r.id for r in load_records(other.train, other, "train")]
    assert c != a and sorted(set(c) - set(a))  # another subset of OCR-VQA


def test_eval_cap_keeps_every_source_round_robin(published):  # noqa: F811
    cfg = DataConfig(train=sources(published), eval_max_samples=6)
    rs = load_records(cfg.eval, cfg, "eval")
    assert [r.origin for r in rs] == ["chartqa", "infovqa", "ocrvqa"] * 2
    assert any("left out" in n for n in rs.notes)


def test_per_source_metrics_and_weighted_mean(published):  # noqa: F811
    from mmtune.evaluate.per_source import per_source_metrics, reported_metrics

    src = sources(published)
    src[0]["weight"], src[1]["weight"] = 3.0, 1.0
    src[2]["metrics"] = ["exact_match"]
    src[2].pop("samples")
    src[2]["weight"] = 1.0
    cfg = RunConfig(model={"name": "tiny/qwen2-vl"}, data={"train": src})
    recs = load_records(cfg.data.eval, cfg.data, "eval")
    refs = [r.references or [r.answer_text()] for r in recs]
    # Right on every chart and book question, wrong on every infographic.
    answers = ["nope" if r.origin == "infovqa" else a[0] for r, a in zip(recs, refs)]
    out = per_source_metrics(cfg, recs.records, answers, refs)
    assert out["chartqa/relaxed_accuracy"] == 1.0 and out["infovqa/anls"] == 0.0 and out["ocrvqa/exact_match"] == 1.0
    assert out["mixture/score"] == pytest.approx((3 * 1.0 + 1 * 0.0 + 1 * 1.0) / 5)
    assert set(out) <= reported_metrics(cfg)
