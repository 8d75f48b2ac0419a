"""Dispatch shortcuts keep the trace byte for byte; CPU kernel scratch buffers; the planned eval phases."""

import pytest
import torch

from mmtune.config import load_config
from mmtune.plan.batch import Declared

COMMON = ["data.max_length=256", "train.precision=fp32", "train.grad_accum=2"]


def _events(observe_from_mode: bool):
    """Forward+backward of a small attention block on fake weights; the tracker's event stream."""
    import torch.nn.functional as F

    from mmtune.plan.fake import ValueFakeMode
    from mmtune.plan.tracker import StorageTracker

    mode, tr = ValueFakeMode(), StorageTracker()
    with mode:
        w = [torch.empty(64, 64, requires_grad=True) for _ in range(4)]
        x = torch.empty(2, 40, 64)
    if observe_from_mode:
        mode.tracker = tr
        ctx = [mode]
    else:
        ctx = [mode, tr]  # the previous arrangement: the tracker as its own dispatch mode on top
    import contextlib

    with contextlib.ExitStack() as st:
        for c in ctx:
            st.enter_context(c)
        q, k, v = (F.linear(x, w[i]).view(2, 40, 4, 16).transpose(1, 2) for i in range(3))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 40, 64)
        loss = F.gelu(F.linear(y, w[3])).float().sum()
        loss.backward()
    mode.tracker = None
    order = {}
    rows = []
    for e in tr.trace.events:
        if e.nbytes > 0:
            order[e.serial] = len(order)
        rows.append((order[e.serial], e.nbytes, e.phase))
    return rows, tr.trace.peak_bytes, len(tr.trace.costs)


def test_tracker_in_fake_mode_gives_the_same_events_as_a_stacked_tracker():
    rows_a, peak_a, _ = _events(observe_from_mode=False)
    rows_b, peak_b, _ = _events(observe_from_mode=True)
    assert len(rows_a) > 20 and rows_a == rows_b and peak_a == peak_b


def test_sdpa_cpu_kernel_scratch_matches_the_profiler():
    from torch.profiler import ProfilerActivity, profile

    from mmtune.plan.kernel_workspace import _BWD, _FWD, cpu_kernel_workspaces

    threads = torch.get_num_threads()
    q = torch.randn(1, 2, 300, 16, requires_grad=True)
    k, v = torch.randn(1, 2, 300, 16, requires_grad=True), torch.randn(1, 2, 300, 16, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)[:2]
        grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            torch.ones_like(out), q, k, v, out, lse, 0.0, False)
    allocs = [e.nbytes() for e in p.profiler.kineto_results.events() if e.name() == "[memory]" and e.nbytes() > 0]
    fwd = cpu_kernel_workspaces(_FWD, (q, k, v), threads)
    bwd = cpu_kernel_workspaces(_BWD, (torch.ones_like(out), q, k, v, out, lse, 0.0, False), threads)
    assert fwd == [threads * (64 * 300 + 2 * 64 + 64 * 16) * 4]
    buf = threads * 2 * 64 * 300 * 4  # q_split 64 (Lq 300), kv_split 300: attn + grad_attn blocks per thread
    assert fwd[0] in allocs and buf in bwd and buf in allocs
    assert 64 * 4 in allocs  # the per-thread row sums (q_split floats)
    del grads


@pytest.mark.parametrize("shape,groups,stride", [((1, 32, 74, 16), 32, 2), ((1, 24, 37, 8), 24, 2), ((1, 40, 37, 8), 40, 2),
                                                   ((2, 32, 74, 16), 32, 2), ((1, 1, 148, 32), 1, 2)])
def test_cpu_conv2d_scratch_matches_the_profiler(shape, groups, stride):
    """The step's peak over a 2-D convolution on the CPU (oneDNN's blocked buffers of a depthwise conv, the native
    path's im2col columns for a small single-channel input) is the output plus the modelled scratch, to the byte."""
    from torch.profiler import ProfilerActivity, profile

    from mmtune.plan.kernel_workspace import _CONV, cpu_kernel_workspaces

    x, w = torch.randn(*shape), torch.randn(32 if groups == 1 else shape[1], shape[1] // groups, 3, 3)
    args = (x, w, None, [stride, stride], [1, 1], [1, 1], False, [0, 0], groups)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        out = torch.ops.aten.convolution(*args)
    cur = peak = 0
    for e in sorted((e for e in p.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns()):
        cur += e.nbytes()
        peak = max(peak, cur)
    scratch = cpu_kernel_workspaces(_CONV, args, torch.get_num_threads())
    assert len(scratch) == 1 and peak == out.numel() * out.element_size() + scratch[0]


def test_audio_encoder_under_checkpointing_within_2_percent_on_cpu():
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.measure import measure_step
    from mmtune.plan.planner import predict, resolve_for_plan

    cfg = load_config(None, COMMON + ["model.name=tiny/qwen2-audio", "adapter.method=lora",
                                      "model.gradient_checkpointing=true"])
    decl = Declared(audio_seconds=[3.0])
    res = predict(cfg, declared=decl)
    measured = measure_step(cfg, worst_case_batch(resolve_for_plan(cfg), declared=decl).micro_batch)
    assert abs(res.tensor_peak_bytes - measured.peak_allocated_bytes) / measured.peak_allocated_bytes <= 0.02


@pytest.mark.parametrize("bs", [1, 16])
def test_eval_phases_are_planned_and_can_be_the_peak(bs):
    from mmtune.plan.planner import predict

    cfg = load_config(None, COMMON + ["model.name=tiny/qwen2", f"eval.batch_size={bs}", "eval.max_new_tokens=64"])
    train_only = predict(cfg, declared=Declared(), plan_eval=False)
    res = predict(cfg, declared=Declared(), plan_eval=True)
    ev = res.eval
    assert ev["batch_size"] == bs and ev["loss_peak_bytes"] > 0 and ev["generation_peak_bytes"] > 0
    text = res.to_dict()
    assert train_only.eval == {} and res.train_tensor_peak_bytes == train_only.tensor_peak_bytes
    # KV cache: 2 (k, v) x layers x kv heads x head dim x fp32 x batch x (prompt + new tokens)
    hc = load_config(None, COMMON + ["model.name=tiny/qwen2"])
    from mmtune.models.model_config import load_hf_config

    c = load_hf_config(hc.model.name)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    assert ev["kv_cache_bytes"] == 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * 4 * bs * (256 + 64)
    if bs == 1:
        assert res.peak_phase in ("forward", "loss", "backward", "optimizer")
    else:  # 16 prompts' full fp32 logits in eval_loss exceed the 1-record train step
        assert res.peak_phase.startswith("eval") and res.tensor_peak_bytes > train_only.tensor_peak_bytes
        assert res.tensor_peak_bytes == ev["tensor_peak_bytes"] and text["breakdown"]["eval"] > 0
