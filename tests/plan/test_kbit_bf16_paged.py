"""adapter.kbit_upcast, train.fp32_trainable=false and paged optimizers: train builds them, the plan counts them."""

import pytest
import torch

from mmtune.config import load_config
from mmtune.errors import ConfigError
from mmtune.plan.batch import Declared

TEXT = ["model.name=tiny/qwen2", "data.max_length=64", "train.precision=bf16", "model.gradient_checkpointing=true"]


def _plan(*over):
    from mmtune.plan.planner import predict

    return predict(load_config(None, TEXT + list(over)), declared=Declared(), plan_eval=False)


def test_kbit_upcast_builds_fp32_weights_and_the_plan_counts_them():
    from mmtune.build import build_model_and_adapters
    from mmtune.resolve import resolve_here

    cfg = load_config(None, TEXT + ["adapter.method=qlora", "adapter.kbit_upcast=true"])
    r = resolve_here(cfg)
    assert r.decision("adapter.kbit_upcast").value == "true"
    _, res = build_model_and_adapters(r)
    frozen = [p for p in res.model.parameters() if not p.requires_grad and p.is_floating_point()]
    bias4 = {id(m.bias) for m in res.model.modules() if "4bit" in type(m).__name__ and m.bias is not None}
    assert frozen and all(p.dtype == torch.float32 for p in frozen if id(p) not in bias4)
    # bnb.nn.Linear4bit casts its bias back to the compute dtype at its first forward, so build leaves it
    upcast_numel = sum(p.numel() for p in frozen if id(p) not in bias4)
    off, on = _plan("adapter.method=qlora"), _plan("adapter.method=qlora", "adapter.kbit_upcast=true")
    # bf16 -> fp32: two more bytes per non-quantized frozen weight (embeddings, norms, lm_head)
    assert on.breakdown["weights"] - off.breakdown["weights"] == 2 * upcast_numel


def test_pure_bf16_full_finetuning_has_no_fp32_copies():
    full = _plan("adapter.method=full")
    pure = _plan("adapter.method=full", "train.fp32_trainable=false")
    # weights, gradients and AdamW's two moments all halve (fp32 -> bf16)
    assert pure.breakdown["trainable_parameters"] * 2 == full.breakdown["trainable_parameters"]
    assert pure.breakdown["optimizer_state"] < full.breakdown["optimizer_state"]
    assert pure.tensor_peak_bytes < full.tensor_peak_bytes
    with pytest.raises(ConfigError, match="needs bf16"):
        from mmtune.resolve import gpu_target, resolve_run

        resolve_run(load_config(None, TEXT + ["train.fp32_trainable=false", "train.precision=fp16"]),
                    gpu_target("t4"))


def test_paged_optimizer_state_is_outside_the_allocator_but_in_the_process_total():
    plain = _plan("adapter.method=full", "train.optimizer=adamw_8bit", "train.gpu=a100-80gb")
    paged = _plan("adapter.method=full", "train.optimizer=paged_adamw_8bit", "train.gpu=a100-80gb")
    state = plain.breakdown["optimizer_state"]
    left = paged.breakdown["optimizer_state"]  # the fp32 step counters (bnb keeps them as tensors)
    assert state > 0 and left < 4 * 64
    assert paged.breakdown["optimizer_state_paged"] == state - left  # the same bnb layout, other memory
    assert paged.peak_allocated_bytes < plain.peak_allocated_bytes
    p32 = _plan("adapter.method=full", "train.optimizer=paged_adamw", "train.gpu=a100-80gb")
    assert p32.breakdown["optimizer_state_paged"] == 8 * p32.trainable_params  # two fp32 moments per weight


def test_kbit_upcast_step_planned_vs_real():
    """fp32 norms feed the 4-bit layers: bnb casts the input to the compute dtype and the output back to
    fp32 (a 16-bit copy kept for backward, fp32 activations); the stand-in does the same."""
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.measure import measure_step
    from mmtune.plan.planner import predict, resolve_for_plan

    cfg = load_config(None, TEXT + ["adapter.method=qlora", "adapter.kbit_upcast=true", "data.max_length=512",
                                    "train.grad_accum=2"])
    res = predict(cfg, declared=Declared(), plan_eval=False)
    measured = measure_step(cfg, worst_case_batch(resolve_for_plan(cfg), declared=Declared()).micro_batch)
    assert abs(res.tensor_peak_bytes - measured.peak_allocated_bytes) / measured.peak_allocated_bytes <= 0.02


def test_planned_8bit_state_is_fake_like_its_parameter():
    """Under the plan's fake mode a bare torch.zeros of uint8 is a "value" and ran for real on the CPU: every
    adapter's moments were filled in memory (60 % of a 7B --search's CPU). Made from the parameter, the state is
    fake on the parameter's device, with the same bytes for the tracker."""
    from mmtune.plan.fake import ValueFakeMode
    from mmtune.plan.optim8bit import PlannedAdamW8bit

    mode = ValueFakeMode()
    with mode:
        p = torch.nn.Parameter(torch.empty(64, 128))  # >= 4096 elements: uint8 moments
        p.grad = torch.empty_like(p)
        small = torch.nn.Parameter(torch.empty(8))  # < 4096: fp32 moments
        small.grad = torch.empty_like(small)
        opt = PlannedAdamW8bit([p, small])
        opt.step()
    st = opt.state[p]
    assert mode.is_our_fake(p) and st["state1"].dtype == torch.uint8 and st["state1"].shape == p.shape
    assert all(mode.is_our_fake(st[k]) for k in ("state1", "state2", "absmax1", "absmax2", "qmap1", "qmap2"))
    assert st["absmax1"].shape == (32,) and mode.is_our_fake(opt.state[small]["state1"])
