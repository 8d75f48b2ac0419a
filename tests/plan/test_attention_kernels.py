"""Attention memory by the kernel the target runs (resolved `attention.kernels`, plan/attention.py)."""

import pytest
import torch

from mmtune.config import load_config
from mmtune.plan.batch import Declared


def _cfg(*over):
    return load_config(None, ["data.max_length=1024", "train.precision=fp32", "train.grad_accum=2", *over])


@pytest.mark.parametrize("name,ckpt,declared", [
    ("tiny/qwen2", "true", Declared()),  # decoder attention, recomputed under checkpointing
    ("tiny/qwen2.5-vl", "false", Declared(images=[(112, 112)])),  # + the vision tower's attention
])
def test_math_kernel_trace_matches_a_real_math_step(name, ckpt, declared):
    """The math kernel (O(seq^2) fp32 scores + softmax) traced vs a real CPU step forced to it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.measure import measure_step
    from mmtune.plan.planner import resolve_for_plan, trace_config

    cfg = _cfg(f"model.name={name}", f"model.gradient_checkpointing={ckpt}")
    r = resolve_for_plan(cfg)
    _, _, ex, _ = trace_config(r, declared=declared, attention_kernels=("math",))
    _, _, plain, _ = trace_config(r, declared=declared)
    batch = worst_case_batch(r, declared=declared).micro_batch
    with sdpa_kernel(SDPBackend.MATH):
        measured = measure_step(cfg, batch).peak_allocated_bytes
    predicted = ex.tracker.trace.peak_bytes
    assert abs(predicted - measured) / measured <= 0.01, (predicted, measured)
    assert predicted > 1.5 * plain.tracker.trace.peak_bytes  # the O(seq^2) buffers are what it models
    assert torch.get_default_device() == torch.device("cpu")


def test_decision_and_per_call_kernel_rules():
    from mmtune.plan.attention import kernel_for_call, kernels_of
    from mmtune.resolve import gpu_target, resolve_run

    def kernels(gpu, *over):
        r = resolve_run(load_config(None, ["model.name=tiny/qwen2", *over]), gpu_target(gpu))
        return r.decision("attention.kernels").value, kernels_of(r)

    assert kernels("a100-80gb", "model.attn_implementation=sdpa") == ("flash>mem_efficient>math",
                                                                      ("flash", "mem_efficient", "math"))
    assert kernels("quadro-rtx-6000", "model.attn_implementation=sdpa")[1] == ("mem_efficient", "math")
    assert kernels("a100-80gb", "model.attn_implementation=eager") == ("eager", None)  # traced as the model runs it
    half = torch.empty(1, 8, 16, 64, dtype=torch.float16, device="meta")
    kv = torch.empty(1, 2, 16, 64, dtype=torch.float16, device="meta")
    assert kernel_for_call(("flash", "mem_efficient", "math"), half, kv, None, True) == "flash"  # GQA: flash takes it
    assert kernel_for_call(("mem_efficient", "math"), half, kv, None, True) == "math"  # mem-efficient refuses GQA
    assert kernel_for_call(("mem_efficient", "math"), half, half, None, False) == "mem_efficient"
    mask = torch.empty(1, 1, 16, 16, dtype=torch.bool, device="meta")
    assert kernel_for_call(("flash", "mem_efficient", "math"), half, half, mask) == "mem_efficient"


def test_gqa_model_on_a_gpu_without_flash_plans_the_math_kernel():
    from mmtune.plan.planner import predict

    over = ["model.name=tiny/qwen2", "model.attn_implementation=sdpa", "model.gradient_checkpointing=true",
            "data.max_length=1024", "train.precision=fp16"]
    t4 = predict(load_config(None, over), gpu="quadro-rtx-6000", declared=Declared(), plan_eval=False)
    a100 = predict(load_config(None, over), gpu="a100-80gb", declared=Declared(), plan_eval=False)
    assert any("x math" in d for d in t4.decisions) and any("x flash" in d for d in a100.decisions)
    assert t4.tensor_peak_bytes > 1.5 * a100.tensor_peak_bytes
