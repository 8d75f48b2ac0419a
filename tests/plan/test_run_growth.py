"""plan/run_growth.py: reserved memory over a run of varying lengths with torch's fixed-segment allocator.

The micro-batches replayed are the run's own (data/batches.py, the run's seed, padded to each batch's
longest record); the replay is traced on the tiny Qwen2 twin and goes through the fixed-segment allocator
model, so a run whose lengths grow leaves segments cached that the one-step plan does not hold.
"""

from __future__ import annotations

import pytest

from mmtune.config import load_config
from mmtune.data.batches import micro_batches_of_epoch
from mmtune.plan.batch import Declared
from mmtune.plan.run_growth import RUN_STEPS, step_lengths

TINY = ["model.name=tiny/qwen2", "data.max_length=2048", "train.micro_batch_size=2", "train.precision=bf16",
        "train.grad_accum=1", "model.gradient_checkpointing=true"]


def test_step_lengths_are_the_samplers_batches_padded_to_their_longest():
    lens = [100, 900, 300, 2500, 50, 700, 1200, 64, 880, 10]
    got = step_lengths(lens, micro_batch_size=2, seed=3, max_length=1024, steps=4)
    capped = [min(n, 1024) for n in lens]
    want = [max(capped[i] for i in b) for b in micro_batches_of_epoch(10, seed=3, epoch=0, micro_batch_size=2)][:4]
    assert got == want
    # more steps than an epoch holds: the next epoch's order follows, as the loader's stream does
    assert len(step_lengths(lens, micro_batch_size=2, seed=3, max_length=1024, steps=12)) == 12
    # length grouping (data.group_by_length): the grouped batches, the longest first
    grouped = step_lengths(lens, micro_batch_size=2, seed=3, max_length=1024, steps=5, group_by_length=True)
    assert grouped[0] == 1024  # the batch holding the longest record comes first (an OOM shows at step 1)
    assert len(step_lengths(lens, micro_batch_size=2, seed=3, max_length=1024)) == RUN_STEPS


@pytest.fixture
def fixed_segments(monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)


def test_varying_lengths_raise_reserved_past_the_one_step_plan(fixed_segments):
    """Lengths that grow over the run (drawn from the data, order as the sampler draws them): each longer
    batch's tensors do not fit the segments cached for the shorter ones, so reserved over the run passes
    the worst-case step's own; allocated does not (no step holds more than the worst one)."""
    from mmtune.plan.planner import predict

    cfg = load_config(None, TINY)
    one = predict(cfg, gpu="a100-80gb", declared=Declared(tokens=2048), plan_eval=False)
    lengths = [256 * k for k in range(1, 9)] * 3
    run = predict(cfg, gpu="a100-80gb", declared=Declared(tokens=2048, lengths=lengths), plan_eval=False)
    assert one.breakdown["reserved_run_growth"] == 0
    assert not any("over a run of varying lengths" in d for d in one.decisions)
    (line,) = [d for d in run.decisions if "over a run of varying lengths" in d]
    assert "micro-batches as the sampler draws them" in line
    assert run.peak_reserved_bytes > one.peak_reserved_bytes
    assert run.breakdown["reserved_run_growth"] == run.peak_reserved_bytes - one.peak_reserved_bytes
    assert run.peak_allocated_bytes == one.peak_allocated_bytes
    assert run.process_total_bytes - one.process_total_bytes == run.breakdown["reserved_run_growth"]


def test_no_replay_where_the_shape_does_not_vary_or_segments_expand(monkeypatch, fixed_segments):
    from mmtune.plan.planner import predict, resolve_for_plan
    from mmtune.plan.run_growth import varies

    cfg = load_config(None, TINY)
    r = resolve_for_plan(cfg, "a100-80gb")
    assert varies(r, [100, 2000])
    assert not varies(r, [4096, 5000])  # both capped at max_length: one padded shape
    assert not varies(r, None)
    assert not varies(resolve_for_plan(load_config(None, TINY + ["data.packing=true"]), "a100-80gb"), [100, 2000])
    assert not varies(resolve_for_plan(cfg, None), [100, 2000])  # a CPU target: no CUDA allocator
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    exp = resolve_for_plan(cfg, "a100-80gb")
    assert exp.expandable_segments and not varies(exp, [100, 2000])
    p = predict(exp, declared=Declared(tokens=2048, lengths=[100, 2000] * 8), plan_eval=False)
    assert p.breakdown["reserved_run_growth"] == 0


def test_the_data_scan_reports_every_records_length(tmp_path):
    import json

    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.planner import resolve_for_plan

    rows = [{"messages": [{"role": "user", "content": "word " * n}, {"role": "assistant", "content": "ok"}]}
            for n in (5, 40, 200)]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = resolve_for_plan(load_config(None, TINY + [f"data.train={path}"]), "a100-80gb")
    pb = worst_case_batch(r)
    assert len(pb.lengths) == 3 and pb.lengths[0] < pb.lengths[1] < pb.lengths[2] == pb.tokens


def test_published_length_statistics_become_record_lengths():
    """benchmarks/published_runs.py: a source's published token statistics (mean, std, min, max) drawn as
    record lengths, then the run's truncation (delete: longer records dropped; truncate: cut)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        from published_runs import record_lengths
    finally:
        sys.path.pop(0)
    stats = {"mean": 3234.4, "std": 2547.5, "min": 91, "max": 19548}
    drawn = record_lengths({**stats, "truncation": "truncate"}, 10**6)
    assert len(drawn) == 4000 and min(drawn) >= 91 and max(drawn) <= 19548
    mean = sum(drawn) / len(drawn)
    assert abs(mean - 3234.4) / 3234.4 < 0.05  # the log-normal of the published mean (clipping moves it little)
    kept = record_lengths(stats, 2048)
    assert kept == [n for n in drawn if n <= 2048]  # delete: the same draw, longer records dropped
    assert record_lengths({**stats, "truncation": "truncate"}, 2048) == [min(n, 2048) for n in drawn]
    assert record_lengths(None, 2048) is None


def test_a_step_that_already_fills_the_gpu_is_not_replayed(fixed_segments):
    """The run can only reserve more than its worst step: where that step alone fills the card, the replay (a
    traced step per batch) is skipped and the decisions say so."""
    from mmtune.plan.planner import predict

    cfg = load_config(None, ["model.name=tiny/qwen2", "data.max_length=8192", "train.micro_batch_size=64",
                             "train.precision=fp16", "train.grad_accum=1", "model.gradient_checkpointing=false",
                             "model.attn_implementation=eager"])
    p = predict(cfg, gpu="t4", declared=Declared(tokens=8192, lengths=[1000, 8192] * 8), plan_eval=False)
    assert p.breakdown["reserved_run_growth"] == 0
    assert any("not replayed" in d and "already fills the GPU" in d for d in p.decisions)
