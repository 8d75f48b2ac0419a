"""data.packing in the planner: the planned batch is a full packed row of data.max_length tokens (the
worst a packed run can draw), and its planned peak matches the measured one on the CPU."""

from mmtune.config import load_config
from mmtune.plan.batch import Declared


def test_a_packed_plan_traces_a_full_row_and_matches_measurement():
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.measure import measure_step
    from mmtune.plan.planner import predict, resolve_for_plan

    common = ["data.max_length=256", "train.precision=fp32", "train.grad_accum=2", "model.name=tiny/qwen2-vl",
              "adapter.method=lora", "model.gradient_checkpointing=false"]
    declared = Declared(images=[(112, 112)], tokens=100)
    unpacked = predict(load_config(None, common), declared=declared)
    cfg = load_config(None, [*common, "data.packing=true"])
    res = predict(cfg, declared=declared)
    pb = worst_case_batch(resolve_for_plan(cfg), declared=declared)
    b = pb.micro_batch
    assert pb.tokens == 256 and "packed: 2 copies filled to 256 tokens" in pb.source
    assert b["input_ids"].shape == (1, 256) and b["position_ids"].shape == (4, 1, 256) and "attention_mask" not in b
    assert b["image_grid_thw"].shape[0] == 2  # both copies' images go through the vision tower
    measured = measure_step(cfg, b).peak_allocated_bytes
    assert abs(res.tensor_peak_bytes - measured) / measured <= 0.02, (res.tensor_peak_bytes, measured)
    assert res.tensor_peak_bytes > unpacked.tensor_peak_bytes
    ev = worst_case_batch(resolve_for_plan(cfg), declared=declared, micro_batch_size=2).micro_batch
    assert ev["input_ids"].shape == (2, 100) and "attention_mask" in ev  # evaluation is not packed
