"""train.loss_impl: the chunked loss equals the full one (loss and gradients), the decision, and the
planner's peak with it (train and plan share mmtune.loss)."""

import importlib.util

import pytest

from mmtune.config import load_config
from mmtune.errors import ConfigError
from mmtune.models.fused_kernels import LIGER_MISSING
from mmtune.plan.batch import Declared
from mmtune.resolve.decisions import decide_loss_impl

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
    from mmtune.resolve import resolve_here

    r = resolve_here(load_config(None, BASE + ["train.loss_impl=auto"]))
    d = r.decision("train.loss_impl")
    assert r.cfg.train.loss_impl == "full" and "auto" in d.reason  # tiny vocabulary: small logits
    big = resolve_here(load_config(None, BASE + ["train.loss_impl=auto", "data.max_length=200000"]))
    assert big.cfg.train.loss_impl == "chunked" and "MiB" in big.decision("train.loss_impl").reason
    # auto never picks Liger where it cannot run, and says why
    assert "no Liger" in big.decision("train.loss_impl").reason


LIGER = importlib.util.find_spec("liger_kernel") is not None


@pytest.mark.skipif(LIGER, reason="checks the refusal where liger-kernel is not installed")
def test_liger_loss_where_it_cannot_run_is_refused_like_fused_kernels():
    """train.loss_impl=liger on this CPU (no liger-kernel) is refused, naming the key, the alternative and the
    pip extra, exactly as train.fused_kernels=liger is; it used to run the chunked path silently instead."""
    from mmtune.resolve import resolve_here

    for key, alternative in (("train.loss_impl", "train.loss_impl=chunked"),
                             ("train.fused_kernels", "train.fused_kernels=none")):
        with pytest.raises(ConfigError) as e:
            resolve_here(load_config(None, BASE + [f"{key}=liger"]))
        assert e.value.where == key and f"{key}=liger cannot be used" in str(e.value) and "CUDA only" in str(e.value)
        assert alternative in e.value.fix and "mmtune[gpu]" in e.value.fix


@pytest.mark.skipif(LIGER, reason="checks the plan for another GPU where liger-kernel is not installed here")
def test_liger_loss_planned_for_another_gpu_is_kept_with_the_gap_stated():
    from mmtune.resolve import gpu_target, resolve_run
    from mmtune.resolve.target import Target

    # planned with this machine's packages (--assume-installed here): the gap is stated
    r = resolve_run(load_config(None, BASE + ["train.loss_impl=liger"]), gpu_target("a100-80gb", assume_installed="here"))
    d = r.decision("train.loss_impl")
    assert r.cfg.train.loss_impl == "liger" and d.value == "liger"
    assert d.reason.startswith("requested; here: liger_kernel is not installed here (pip install 'mmtune[gpu]'")
    # planned for the A100 as set up with mmtune[gpu] (the default): Liger runs there, nothing missing
    r = resolve_run(load_config(None, BASE + ["train.loss_impl=liger"]), gpu_target("a100-80gb"))
    assert r.decision("train.loss_impl").reason.startswith("requested; Liger-Kernel's fused linear cross entropy")
    # the same GPU as this machine's: refused (it would not run here)
    local_a100 = Target("cuda", gpu_target("a100-80gb").gpu, "this machine", local=True)
    with pytest.raises(ConfigError, match="train.loss_impl=liger cannot be used: liger_kernel is not installed"):
        decide_loss_impl("liger", local_a100, rows=128, vocab=1000, liger_missing=LIGER_MISSING)
    # auto on that GPU without liger-kernel here: chunked, not liger
    v, d = decide_loss_impl("auto", gpu_target("a100-80gb"), rows=1 << 20, vocab=1 << 16, liger_missing=LIGER_MISSING)
    assert v == "chunked" and "no Liger: liger_kernel is not installed here" in d.reason


def test_smoke_run_of_a_liger_recipe_runs_the_torch_paths():
    """A recipe written for a CUDA machine with Liger still smoke-tests on this CPU (as flash_attention_2 ->
    sdpa): the twin runs chunked / transformers' modules, each change said in the notes."""
    from mmtune.resolve import resolve_here
    from mmtune.smoke import smoke_config

    cfg = load_config(None, BASE + ["train.loss_impl=liger", "train.fused_kernels=liger"])
    run_cfg, notes = smoke_config(cfg)
    assert (run_cfg.train.loss_impl, run_cfg.train.fused_kernels) == ("chunked", "none")
    assert any(n.startswith("train.loss_impl liger -> chunked") for n in notes)
    assert any(n.startswith("train.fused_kernels liger -> none") for n in notes)
    assert resolve_here(run_cfg).cfg.train.loss_impl == "chunked"


def test_liger_loss_on_cuda_with_liger_installed():
    """Where it can run (a CUDA target, liger_kernel importable) liger is kept when asked and picked by auto."""
    from mmtune.resolve import gpu_target
    from mmtune.resolve.target import Target

    local_a100 = Target("cuda", gpu_target("a100-80gb").gpu, "this machine", local=True)
    v, d = decide_loss_impl("liger", local_a100, rows=128, vocab=1000, liger_missing=None)
    assert v == "liger" and d.reason.startswith("requested; Liger") and not d.changed
    v, d = decide_loss_impl("auto", local_a100, rows=1 << 20, vocab=1 << 16, liger_missing=None)
    assert v == "liger" and d.changed
    assert decide_loss_impl("chunked", local_a100, rows=128, vocab=1000, liger_missing=None)[0] == "chunked"


@pytest.mark.skipif(LIGER, reason="checks what the doctor says where liger-kernel is not installed")
def test_doctor_covers_the_liger_loss_like_fused_kernels(tmp_path):
    import yaml

    from mmtune.doctor.runner import run_doctor

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"name": "tiny/qwen2"}, "data": {"train": "synthetic:counting"},
                                   "train": {"loss_impl": "liger", "fused_kernels": "none"}}))
    # planned for an A100 set up with mmtune[gpu] (the default): nothing to say; with this machine's packages:
    # kept, and MM081 says what the GPU machine needs
    assert "MM081" not in run_doctor(cfg, [], "a100-80gb", fast=True).codes()
    rep = run_doctor(cfg, [], "a100-80gb", fast=True, assume_installed="here")
    found = [f for f in rep.findings if f.code == "MM081"]
    assert len(found) == 1 and found[0].severity == "info" and found[0].where == "train.loss_impl"
    assert "liger_kernel is not installed here" in found[0].message and "mmtune[gpu]" in found[0].fix
    assert "train.loss_impl=chunked" in found[0].fix
    rep = run_doctor(cfg, ["train.fused_kernels=liger"], "a100-80gb", fast=True, assume_installed="here")  # one each
    assert sorted(f.where for f in rep.findings if f.code == "MM081") == ["train.fused_kernels", "train.loss_impl"]
    rep = run_doctor(cfg, ["train.device=cpu"], None, fast=True)  # on this CPU: the resolved run refuses it
    errors = [f for f in rep.findings if f.severity == "error"]
    assert len(errors) == 1 and errors[0].where == "train.loss_impl" and "CUDA only" in errors[0].message


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
