"""The plan of a DPO run is the trace of the loop's own DPO step: chosen + rejected rows in one forward, the
reference forward under no_grad (adapters disabled, or a frozen copy held as weights for full fine-tuning).
Planned peak vs a real CPU step of the same batch, as the other plan-vs-real tests compare them."""

from __future__ import annotations

import pytest

from mmtune.config import load_config
from mmtune.plan.batch import Declared

COMMON = ["model.name=tiny/qwen2-vl", "data.max_length=128", "train.precision=fp32", "train.grad_accum=2",
          "model.gradient_checkpointing=false", "train.device=cpu"]
DECLARED = Declared(images=[(112, 112)], tokens=96)


@pytest.mark.parametrize("method", ["lora", "full"])
def test_dpo_plan_matches_a_real_cpu_step(method):
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.measure import measure_step
    from mmtune.plan.planner import predict, resolve_for_plan

    cfg = load_config(None, [*COMMON, f"adapter.method={method}", "train.objective=dpo"])
    pb = worst_case_batch(resolve_for_plan(cfg), declared=DECLARED)
    b = pb.micro_batch
    assert b["input_ids"].shape == (2, 96) and b["image_grid_thw"].shape[0] == 1  # one pair; its pixels once
    res = predict(cfg, declared=DECLARED)
    measured = measure_step(cfg, b).peak_allocated_bytes
    assert abs(res.tensor_peak_bytes - measured) / measured <= 0.02, (res.tensor_peak_bytes, measured)
    sft = predict(load_config(None, [*COMMON, f"adapter.method={method}"]), declared=DECLARED)
    assert res.tensor_peak_bytes > sft.tensor_peak_bytes  # two rows per record and a reference forward
    if method == "full":  # the frozen copy is held as weights beside the trained ones
        assert res.breakdown["weights"] - sft.breakdown["weights"] >= 0.9 * sft.breakdown["trainable_parameters"]
        assert any("frozen reference copy" in d for d in res.decisions)
