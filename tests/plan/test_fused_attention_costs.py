"""What the trace adds for fused attention on a CUDA target: its FLOPs (the CPU flash op that stands for the
GPU kernel has no entry in torch's flop registry) and FlashAttention-2's backward buffers; and pure bf16
(train.fp32_trainable=false) holding LoRA adapters in bf16 in the plan as in the built run."""

import pytest
import torch

from mmtune.config import load_config

TEXT = ["model.name=tiny/qwen2", "train.grad_accum=2", "train.fused_kernels=none"]


def _brute_pairs(q, k, causal):
    return sum(1 for i in range(q) for j in range(k) if not causal or j <= i + k - q)


def test_causal_pairs_follow_the_bottom_right_mask():
    from mmtune.plan.attention import _unmasked_pairs

    for q in range(1, 10):
        for k in range(1, 10):
            assert _unmasked_pairs(q, k, True) == _brute_pairs(q, k, True), (q, k)
            assert _unmasked_pairs(q, k, False) == q * k
    assert _unmasked_pairs(4096, 4096, True) == 4096 * 4097 // 2  # about half of the square


def test_flash_flops_match_torchs_formulas_halved_when_causal():
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    from mmtune.plan.attention import fused_attention_flops

    fwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    bwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    q = torch.empty(2, 4, 64, 32, dtype=torch.bfloat16, device="meta")
    full_f = sdpa_flop_count(q.shape, q.shape, q.shape)
    full_b = sdpa_backward_flop_count(q.shape, q.shape, q.shape, q.shape)
    assert fused_attention_flops(fwd, (q, q, q, 0.0, False)) == full_f
    assert fused_attention_flops(bwd, (q, q, q, q, q, None, 0.0, False)) == full_b
    half = 64 * 65 / 2 / 64**2
    assert fused_attention_flops(fwd, (q, q, q, 0.0, True)) == pytest.approx(full_f * half)
    assert fused_attention_flops(bwd, (q, q, q, q, q, None, 0.0, True)) == pytest.approx(full_b * half)
    assert fused_attention_flops(torch.ops.aten.mm.default, (q, q)) == 0


def _trace(*over, gpu="a100-80gb"):
    from mmtune.plan.planner import resolve_for_plan, trace_config

    cfg = load_config(None, TEXT + list(over))
    return trace_config(resolve_for_plan(cfg, gpu), plan_eval=False)


def test_a_cuda_flash_step_prices_attention_and_holds_fa2_buffers():
    from mmtune.plan.kernel_workspace import cuda_flash_workspaces

    _, _, ex, _ = _trace("model.attn_implementation=flash_attention_2", "data.max_length=512")
    tr = ex.tracker.trace
    assert ex.tracker.cuda_flash
    work = [s for s in tr.storages.values() if s.op.endswith(":workspace")]
    assert work and all(s.phase == "backward" for s in work)
    # the buffers' sizes are FA2's for this call: softmax_d + dq_accum (+ GQA's expanded dk/dv)
    bwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    q = torch.empty(1, 4, 512, 16, dtype=torch.bfloat16, device="meta")
    k = torch.empty(1, 2, 512, 16, dtype=torch.bfloat16, device="meta")
    expected = [4 * 512 * 4, 512 * 4 * 32 * 4] + [512 * 4 * 16 * 2] * 2  # head dim 16 rounds up to 32 in dq_accum
    assert cuda_flash_workspaces(bwd, (q, q, k, k, q, None, 0.0, True)) == expected
    assert cuda_flash_workspaces(bwd, (q, q, q, q, q, None, 0.0, True), {"attn_mask": q}) == []  # masked: not flash
    assert cuda_flash_workspaces(bwd, (q.float(), q.float(), q.float(), q, q, None, 0.0, True)) == []  # fp32: not flash


def test_attention_time_grows_with_the_square_of_the_length():
    from mmtune.plan.planner import predict

    def attn_flops(n):
        r = predict(load_config(None, TEXT + ["model.attn_implementation=flash_attention_2", f"data.max_length={n}"]),
                    gpu="a100-80gb", plan_eval=False)
        return r.flops_per_step

    short, long = attn_flops(256), attn_flops(1024)
    # linear layers scale 4x from 256 to 1024 tokens; the attention term adds more than that
    assert long > 4 * short


def test_pure_bf16_lora_adapters_are_bf16_in_the_plan_and_the_built_run():
    from mmtune.build import build_run
    from mmtune.plan.model import build_planned_model
    from mmtune.plan.planner import resolve_for_plan

    over = ["adapter.method=lora", "train.fp32_trainable=false"]
    cfg = load_config(None, TEXT + over)
    planned = build_planned_model(resolve_for_plan(cfg, "a100-80gb")).model
    built = build_run(cfg, with_data=False, with_optimizer=False)  # real weights, on this machine
    for model in (planned, built.model):
        dtypes = {p.dtype for p in model.parameters() if p.requires_grad}
        assert dtypes == {torch.bfloat16}, dtypes
    default = build_planned_model(resolve_for_plan(load_config(None, TEXT + ["adapter.method=lora"]), "a100-80gb")).model
    assert {p.dtype for p in default.parameters() if p.requires_grad} == {torch.float32}  # master weights by default
