"""train.loss_impl: the chunked loss equals the full one (loss and gradients), the decision, and the
planner's peak with it (train and plan share mmtune.loss)."""

import pytest

from mmtune.config import load_config
from mmtune.plan.batch import Declared

BASE = ["model.name=tiny/qwen2-vl", "data.max_length=128", "train.precision=fp32", "adapter.method=lora",
        "adapter.dropout=0", "adapter.train_components=[lm_head]"]


def test_chunked_loss_and_grads_equal_full_loss_fp32():
    from mmtune.build import build_model_and_adapters
    from mmtune.loss import loss_sum_and_output
    from mmtune.plan.batch import worst_case_batch
    from mmtune.resolve import resolve_here

    r = resolve_here(load_config(None, BASE))
    _, res = build_model_and_adapters(r)
    batch = worst_case_batch(r, declared=Declared(images=[(56, 56)])).micro_batch
    model = res.model
    got = {}
    for impl in ("full", "chunked"):
        model.zero_grad()
        total, n, _ = loss_sum_and_output(model, batch, impl=impl)
        total.backward()
        got[impl] = (total.item(), int(n), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
    (lf, nf, gf), (lc, nc, gc) = got["full"], got["chunked"]
    assert nf == nc > 0
    assert lc == pytest.approx(lf, rel=1e-5)
    assert gf.keys() == gc.keys() and any("lm_head" in k for k in gf)  # the head's own gradient too
    for k in gf:
        scale = max(1.0, gf[k].abs().max().item())
        assert (gf[k] - gc[k]).abs().max().item() <= 1e-5 * scale, k


def test_loss_impl_decision():
    from mmtune.resolve import gpu_target, resolve_here, resolve_run

    r = resolve_here(load_config(None, BASE + ["train.loss_impl=auto"]))
    d = r.decision("train.loss_impl")
    assert r.cfg.train.loss_impl == "full" and "auto" in d.reason  # tiny vocabulary: small logits
    big = resolve_here(load_config(None, BASE + ["train.loss_impl=auto", "data.max_length=200000"]))
    assert big.cfg.train.loss_impl == "chunked" and "MiB" in big.decision("train.loss_impl").reason
    # liger asked for on the CPU: the chunked torch path, said why
    r = resolve_run(load_config(None, BASE + ["train.loss_impl=liger"]), gpu_target("a100-80gb"))
    assert r.cfg.train.loss_impl in ("liger", "chunked")
    assert resolve_here(load_config(None, BASE + ["train.loss_impl=liger"])).cfg.train.loss_impl == "chunked"


def test_planner_peak_drops_with_chunked_loss_and_matches_a_real_step():
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.measure import measure_step
    from mmtune.plan.planner import predict, resolve_for_plan

    # without checkpointing the peak is where backward starts, with the full loss's fp32 logits alive
    text = ["model.name=tiny/qwen2", "data.max_length=1024", "train.precision=fp32", "adapter.method=lora",
            "model.gradient_checkpointing=false"]
    full = predict(load_config(None, text + ["train.loss_impl=full"]), declared=Declared(), plan_eval=False)
    cfg = load_config(None, text + ["train.loss_impl=chunked"])
    chunked = predict(cfg, declared=Declared(), plan_eval=False)
    assert chunked.tensor_peak_bytes < full.tensor_peak_bytes
    assert chunked.breakdown["logits_loss"] < full.breakdown["logits_loss"]
    batch = worst_case_batch(resolve_for_plan(cfg), declared=Declared()).micro_batch
    measured = measure_step(cfg, batch).peak_allocated_bytes
    assert abs(chunked.tensor_peak_bytes - measured) / measured <= 0.02, (chunked.tensor_peak_bytes, measured)
