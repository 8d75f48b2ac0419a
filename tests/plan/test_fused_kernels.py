"""train.fused_kernels: the decision, the torch twins of Liger's kernels, and what the planner models with them."""

import importlib
import importlib.util

import pytest
import torch

from mmtune.config import load_config
from mmtune.errors import ConfigError
from mmtune.models.families import FAMILIES
from mmtune.resolve import gpu_target, resolve_run
from mmtune.resolve.decisions import decide_fused_kernels

LIGER = importlib.util.find_spec("liger_kernel") is not None


def _family(name):
    from mmtune.models.families import FAMILIES

    return FAMILIES[name]


def _adapter(method="lora"):
    return load_config(None, ["model.name=tiny/qwen2", f"adapter.method={method}"]).adapter


# ------------------------------------------------------------------------------------------ the decision
def test_auto_picks_liger_only_on_cuda_installed_and_supported():
    from mmtune.resolve.target import Target

    cpu = Target("cpu", None, "this machine", local=True)
    a100 = gpu_target("a100-80gb")
    local_a100 = Target("cuda", a100.gpu, "this machine", local=True)
    qwen2 = _family("qwen2")
    v, d = decide_fused_kernels("auto", local_a100, qwen2, _adapter(), None)
    assert v == "liger" and d.reason.startswith("auto: CUDA (sm_80)") and "RMSNorm + SwiGLU + RoPE" in d.value
    v, d = decide_fused_kernels("auto", cpu, qwen2, _adapter(), None)
    assert v == "none" and "CUDA only" in d.reason
    v, d = decide_fused_kernels("auto", local_a100, qwen2, _adapter(), "liger_kernel is not installed here")
    assert v == "none" and d.reason == "auto: liger_kernel is not installed here"
    v, d = decide_fused_kernels("auto", local_a100, _family("qwen2_audio"), _adapter(), None)
    assert v == "none" and "no patch for qwen2_audio" in d.reason
    v, d = decide_fused_kernels("auto", local_a100, qwen2, _adapter("qlora"), None)
    assert v == "liger" and "4-bit projections stay bitsandbytes'" in d.reason
    v, d = decide_fused_kernels("none", local_a100, qwen2, _adapter(), None)
    assert v == "none" and d.reason.startswith("requested")


def test_liger_where_it_cannot_run_is_refused_naming_the_key():
    from mmtune.resolve.target import Target

    cpu = Target("cpu", None, "this machine", local=True)
    local_a100 = Target("cuda", gpu_target("a100-80gb").gpu, "this machine", local=True)
    for target, family, problem, said in ((cpu, "qwen2", None, "CUDA only"),
                                          (local_a100, "qwen2", "liger_kernel is not installed here", "not installed"),
                                          (gpu_target("a100-80gb"), "llava_next", None, "no patch for llava_next")):
        with pytest.raises(ConfigError) as e:
            decide_fused_kernels("liger", target, _family(family), _adapter(), problem)
        assert e.value.where == "train.fused_kernels" and said in str(e.value) and "fused_kernels=none" in e.value.fix
    # planned for another machine: kept as asked (the doctor's MM081 checks that machine), the gap stated
    v, d = decide_fused_kernels("liger", gpu_target("a100-80gb"), _family("qwen2"), _adapter(),
                                "liger_kernel is not installed here")
    assert v == "liger" and d.reason == "requested; here: liger_kernel is not installed here"


def test_resolved_run_records_it_and_cpu_runs_keep_transformers_modules():
    from mmtune.resolve.target import local_target

    r = resolve_run(load_config(None, ["model.name=tiny/qwen2"]), local_target("cpu"))
    assert r.cfg.train.fused_kernels == "none" and r.requested.train.fused_kernels == "auto"
    assert "train.fused_kernels: none (auto: Liger's kernels are Triton, CUDA only" in "\n".join(r.summary_lines())
    with pytest.raises(ConfigError, match="train.fused_kernels=liger cannot be used"):
        resolve_run(load_config(None, ["model.name=tiny/qwen2", "train.fused_kernels=liger"]), local_target("cpu"))


# ------------------------------------------------------------------------------------------ the twins
def _eager_and_twin(module, twin_forward, x):
    from types import MethodType

    out = {}
    for which in ("eager", "twin"):
        if which == "twin":
            module.forward = MethodType(twin_forward, module)
        xi = x.detach().clone().requires_grad_(True)
        y = module(xi)
        g = torch.randn_like(y, generator=torch.Generator().manual_seed(1))
        (y * g).sum().backward()
        out[which] = (y.detach(), xi.grad, [p.grad.clone() for p in module.parameters() if p.grad is not None])
        module.zero_grad()
    return out


def test_twins_compute_what_transformers_modules_compute():
    """Same values and gradients as transformers' RMSNorm and Qwen2 MLP (fp32: to float rounding), so
    the twin is the kernel's math and only its memory differs."""
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2MLP, Qwen2RMSNorm

    from mmtune.plan.fused_kernels import _rms_norm_forward, _swiglu_forward

    torch.manual_seed(0)
    norm = Qwen2RMSNorm(64, eps=1e-6)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)  # a trained weight: its gradient is compared too
    out = _eager_and_twin(norm, _rms_norm_forward, torch.randn(3, 7, 64))
    for a, b in zip(out["eager"][:2] + tuple(out["eager"][2]), out["twin"][:2] + tuple(out["twin"][2])):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    mlp = Qwen2MLP(Qwen2Config(hidden_size=32, intermediate_size=48, hidden_act="silu"))
    out = _eager_and_twin(mlp, _swiglu_forward, torch.randn(2, 5, 32))
    assert len(out["twin"][2]) == 3
    for a, b in zip(out["eager"][:2] + tuple(out["eager"][2]), out["twin"][:2] + tuple(out["twin"][2])):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _saved_bytes(fn, x):
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return sum(seen.values())


def test_twins_save_what_liger_functions_save():
    """What autograd keeps, measured on real CPU tensors under bf16 autocast: RMSNorm keeps X (bf16) + fp32
    1/rms where transformers keeps an fp32 copy of X + 1/rms; the MLP drops silu(gate)."""
    from types import MethodType

    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2MLP, Qwen2RMSNorm

    from mmtune.plan.fused_kernels import _rms_norm_forward, _swiglu_forward

    rows, hidden, inter = 96, 64, 160
    norm = Qwen2RMSNorm(hidden).to(torch.bfloat16).requires_grad_(False)
    mlp = Qwen2MLP(Qwen2Config(hidden_size=hidden, intermediate_size=inter)).to(torch.bfloat16)
    x = torch.randn(rows, hidden, dtype=torch.bfloat16, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager_norm, eager_mlp = _saved_bytes(norm, x), _saved_bytes(mlp, x)
        norm.forward, mlp.forward = MethodType(_rms_norm_forward, norm), MethodType(_swiglu_forward, mlp)
        twin_norm, twin_mlp = _saved_bytes(norm, x), _saved_bytes(mlp, x)
    weights = hidden * 2  # the norm's weight (saved by both)
    assert eager_norm == rows * hidden * 4 + rows * 4 + weights
    assert twin_norm == rows * hidden * 2 + rows * 4 + weights
    assert eager_mlp - twin_mlp == rows * inter * 2  # silu(gate) in bf16


# ------------------------------------------------------------------------------------------ the planner
def _live_before_backward(ex) -> int:
    tr = ex.tracker.trace
    first = next(i for i, ev in enumerate(tr.events) if ev.phase == "backward")
    return sum(ev.nbytes for ev in tr.events[:first])


@pytest.mark.parametrize("precision,norm_saving_per_byte", [("bf16", 2), ("fp32", 0)])
def test_plan_models_the_saved_activations_liger_drops(precision, norm_saving_per_byte):
    """Tiny Qwen2 (2 layers, LoRA, no checkpointing) planned for an A100: the bytes alive when backward
    starts drop by exactly what the twins model: silu(gate) per layer (rows x intermediate x dtype) and,
    under bf16, rows x hidden x 2 per norm that autograd records (the first layer's input norm sees
    frozen embeddings and records nothing either way). Plan output names the decision and the model."""
    from mmtune.plan.planner import trace_config

    def plan(fused):
        cfg = load_config(None, ["model.name=tiny/qwen2", f"train.precision={precision}", "data.max_length=256",
                                 "train.micro_batch_size=2", "model.gradient_checkpointing=false",
                                 f"train.fused_kernels={fused}"])
        r = resolve_run(cfg, gpu_target("a100-80gb"))
        pm, pb, ex, _ = trace_config(r)
        return r, pm, pb, ex

    _, _, pb, none = plan("none")
    r, pm, _, liger = plan("liger")
    hf = pm.hf_config
    rows = pb.micro_batch["input_ids"].numel()
    dtype_bytes = 2 if precision == "bf16" else 4
    layers = hf.num_hidden_layers
    norms_recorded = 2 * layers + 1 - 1  # input + post-attention per layer + the final norm - layer 0's input norm
    expected = layers * rows * hf.intermediate_size * dtype_bytes + norms_recorded * rows * hf.hidden_size * \
        norm_saving_per_byte
    assert _live_before_backward(none) - _live_before_backward(liger) == expected
    assert liger.tracker.trace.peak_bytes < none.tracker.trace.peak_bytes
    line = r.decision("train.fused_kernels").line()
    assert line.startswith("train.fused_kernels: liger: RMSNorm + SwiGLU + RoPE (Liger-Kernel) (requested")
    assert any(d.startswith("fused kernels: Liger planned by torch twins") and "5 RMSNorm" in d and "2 SwiGLU" in d
               for d in pm.decisions)


def test_plan_result_names_the_decision():
    from mmtune.plan.planner import predict

    cfg = load_config(None, ["model.name=tiny/qwen2", "data.max_length=128", "train.fused_kernels=liger"])
    res = predict(cfg, gpu="a100-80gb")
    assert any(d.startswith("train.fused_kernels: liger") for d in res.decisions)
    assert any(d.startswith("fused kernels: Liger planned by torch twins") for d in res.decisions)


# ------------------------------------------------------------------------------------------ Liger itself
@pytest.mark.parametrize("name,counts", [
    ("tiny/qwen2", {"rms_norm": 5, "swiglu": 2}),
    ("tiny/qwen2-vl", {"rms_norm": 5, "swiglu": 2, "layer_norm": 4}),  # + the vision blocks' LayerNorms
    ("tiny/qwen2.5-vl", {"rms_norm": 9, "swiglu": 2}),  # + the vision blocks' RMSNorms
    ("tiny/qwen3-vl", {"rms_norm": 9}),  # + q_norm / k_norm; no SwiGLU (Liger's default for Qwen3-VL)
    ("tiny/llava", {"rms_norm": 5, "swiglu": 2}),  # the text model only
])
def test_liger_module_selection_per_family(name, counts):
    """The modules the twins replace (Liger's per-instance patch, by family), on the adapted model."""
    from collections import Counter

    from mmtune.build import build_model_and_adapters
    from mmtune.models.fused_kernels import liger_modules

    r = resolve_run(load_config(None, [f"model.name={name}"]), gpu_target("a100-80gb"))
    loaded, result = build_model_and_adapters(r, meta=True)
    found = Counter(k for k, _ in liger_modules(result.model, loaded.family.liger).values())
    assert dict(found) == counts


@pytest.mark.skipif(not LIGER, reason="liger-kernel not installed: checks that Liger's own per-instance patch "
                                      "replaces exactly the modules the planner's twins replace")
@pytest.mark.parametrize("name", [f.tiny for f in FAMILIES.values() if f.liger is not None and f.tiny])
def test_liger_patches_the_modules_the_planner_models(name):
    """Liger's patch only rebinds forwards (no kernel runs), so this holds on a CPU: after adapters, the
    modules Liger patched are the ones plan/fused_kernels.py replaces. Where this liger-kernel's patch does
    not import with this transformers (0.8.5's VL patches on transformers 5.23), the resolved run's probe
    says so and the build refuses with the key to change."""
    from mmtune.build import build_model_and_adapters
    from mmtune.errors import ModelLoadError
    from mmtune.models.fused_kernels import (
        apply_liger,
        liger_modules,
        liger_problem,
        patched_by_liger,
    )
    from mmtune.resolve.target import local_target

    r = resolve_run(load_config(None, [f"model.name={name}"]), local_target("cpu"))
    loaded, result = build_model_and_adapters(r)
    problem = liger_problem(loaded.family, probe=True)
    # Liger also swaps classes and functions in transformers' modeling modules (for models built later):
    # put them back, so later tests in this process build transformers' own modules.
    modeling = [importlib.import_module(f"transformers.models.{t}.modeling_{t}")
                for t in ("qwen2", "llama", "llava", "qwen2_vl", "qwen2_5_vl", "qwen3_vl")]
    before = [dict(vars(m)) for m in modeling]
    try:
        if problem:
            with pytest.raises(ModelLoadError) as e:
                apply_liger(result.model, loaded.family)
            assert e.value.where == "train.fused_kernels" and "fused_kernels=none" in e.value.fix
            return
        lines = apply_liger(result.model, loaded.family)
    finally:
        for m, attrs in zip(modeling, before):
            for k in set(vars(m)) - set(attrs):
                delattr(m, k)
            for k, v in attrs.items():
                setattr(m, k, v)
    kinds = {"LigerRMSNorm": "rms_norm", "LigerSwiGLUMLP": "swiglu", "LigerLayerNorm": "layer_norm"}
    planned = {p: k for p, (k, _) in liger_modules(result.model, loaded.family.liger).items()}
    assert {p: kinds[c] for p, c in patched_by_liger(result.model).items()} == planned
    assert len(lines) == 1 and "replaced" in lines[0]  # RoPE: the modeling module's function was swapped


def test_doctor_says_what_the_gpu_machine_needs(tmp_path):
    import yaml

    from mmtune.doctor.runner import run_doctor

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"name": "tiny/qwen2"}, "data": {"train": "synthetic:counting"},
                                   "train": {"fused_kernels": "liger"}}))
    # A plan for a catalog GPU assumes mmtune[gpu] there (liger-kernel with it): nothing to say ...
    rep = run_doctor(cfg, [], "a100-80gb", fast=True)
    assert "MM081" not in rep.codes()
    # ... unless told the machine has only the core packages, or this machine's (without liger-kernel).
    rep = run_doctor(cfg, [], "a100-80gb", fast=True, assume_installed="none")
    found = [f for f in rep.findings if f.code == "MM081"]
    assert len(found) == 1 and found[0].severity == "info" and "assumed absent" in found[0].message
    rep = run_doctor(cfg, [], "a100-80gb", fast=True, assume_installed="here")
    found = [f for f in rep.findings if f.code == "MM081"]
    if LIGER:  # installed here: nothing to say
        assert not found
    else:
        assert len(found) == 1 and found[0].severity == "info" and "liger_kernel is not installed here" in found[0].message
    rep = run_doctor(cfg, ["train.fused_kernels=none"], "a100-80gb", fast=True)
    assert "MM081" not in rep.codes()
