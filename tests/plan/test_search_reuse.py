"""`plan --search` plans knob groups in forked workers that share the parent's warm state: every
candidate's result must equal planning that candidate alone with `predict()`."""

import pytest

from mmtune.config import load_config


def _alone(cfg, c, gpu):
    from mmtune.plan.planner import predict
    from mmtune.plan.search import _with

    return predict(_with(cfg, c.overrides), gpu=gpu)


def _same(a, b) -> None:
    da, db = a.to_dict(), b.to_dict()
    da.pop("plan_seconds"), db.pop("plan_seconds")
    assert da == db


def _check(cfg, gpu, **knobs):
    from mmtune.plan.search import search

    par = search(cfg, gpu=gpu, workers=2, **knobs)
    seq = search(cfg, gpu=gpu, workers=1, **knobs)
    assert [c.overrides for c in par.tried] == [c.overrides for c in seq.tried]
    assert par.best.overrides == seq.best.overrides
    assert len(par.tried) >= 4 and all(c.result is not None for c in par.tried)
    for c, s in zip(par.tried, seq.tried):
        _same(c.result, s.result)
        _same(c.result, _alone(cfg, c, gpu))
    return par


def test_search_on_a_tiny_twin_equals_each_candidate_planned_alone():
    cfg = load_config(None, ["model.name=tiny/qwen2", "data.max_length=128", "train.micro_batch_size=1",
                             "train.grad_accum=4", "train.precision=fp16"])
    res = _check(cfg, "t4", micro_batches=(1, 2), methods=["lora", "qlora"], optimizers=["adamw", "adamw_8bit"],
                 checkpointing=[True])
    assert {c.overrides["adapter.method"] for c in res.tried} == {"lora", "qlora"}


def test_search_on_a_small_real_model_equals_each_candidate_planned_alone():
    """Qwen2.5-7B's embedded config (real widths, 152k vocabulary) cut to 6 decoder layers."""
    from mmtune.models.loading import DECODER_LAYERS

    cfg = load_config("recipes/seed001_qwen2.5-7b_lora.yaml", ["data.max_length=128"])
    token = DECODER_LAYERS.set(6)
    try:
        res = _check(cfg, "quadro-rtx-6000", micro_batches=(1, 2), methods=["lora"],
                     optimizers=["adamw", "adamw_8bit"], checkpointing=[False, True])
    finally:
        DECODER_LAYERS.reset(token)
    assert any("four layers" in d for d in res.tried[0].result.decisions)  # the layer dedup path was taken


@pytest.mark.parametrize("workers", [1, 2])
def test_search_passes_nodes_to_every_candidate(workers):
    from mmtune.plan.search import search

    cfg = load_config(None, ["model.name=tiny/qwen2", "data.max_length=64", "adapter.method=full"])
    res = search(cfg, gpu="h100", gpus=16, nodes=2, micro_batches=(1,), methods=["full"], optimizers=["adamw"],
                 checkpointing=[True], workers=workers)
    assert all(c.result.comm["nodes"] == 2 and c.result.comm["inter_node_s"] > 0 for c in res.tried)
