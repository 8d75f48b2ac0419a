"""Qwen3.5's facts that the family-parametrised contract tests do not state: packing is refused because the
linear-attention layers carry their state across a packed row's records (shown on the twin, against the same twin
with full attention only), the run says which linear-attention path it takes, LoRA's default targets reach the
linear layers' big projections and not their per-head gates, and doctor MM343 names the kernels for a GPU plan."""

from __future__ import annotations

import pytest

from mmtune.config.schema import RunConfig
from mmtune.models.families import FAMILIES

TWIN = "tiny/qwen3_5"


def _packed_and_unpacked_loss(tmp_path, **overrides):
    from mmtune.compat.rope_index import rope_index_of
    from mmtune.data.packing import pack_row
    from tests.data.test_packing import _loss_and_grads, _setup

    tmp_path.mkdir()
    model, collate, items = _setup(TWIN, tmp_path, **overrides)
    loss0, n0, _ = _loss_and_grads(model, collate(items))
    rope = rope_index_of(model)
    loss1, n1, _ = _loss_and_grads(model, collate([pack_row(items[:3], rope), pack_row(items[3:], rope)]))
    assert n0 == n1
    return loss0, loss1


def test_a_packed_row_carries_the_linear_attention_state_across_records(tmp_path):
    # the same twin with full attention only packs exactly (positions restart per record) ...
    full0, full1 = _packed_and_unpacked_loss(tmp_path / "full", layer_types=["full_attention"] * 4)
    assert abs(full1 - full0) < 1e-5
    # ... the real 3:1 hybrid does not: records after the first start from the previous record's state
    hybrid0, hybrid1 = _packed_and_unpacked_loss(tmp_path / "hybrid")
    assert abs(hybrid1 - hybrid0) > 1e-4, (hybrid0, hybrid1)


def test_packing_is_refused_with_the_families_reason():
    from mmtune.errors import ConfigError
    from mmtune.resolve.decisions import decide_packing

    cfg = RunConfig.model_validate({"model": {"name": TWIN}, "data": {"packing": True}})
    with pytest.raises(ConfigError, match="recurrent state") as e:
        decide_packing(cfg, FAMILIES["qwen3_5"], "sdpa")
    assert "data.packing=false" in str(e.value.fix)


def test_the_run_says_which_linear_attention_path_it_takes():
    from mmtune.gpus import get_gpu
    from mmtune.resolve.linear_attention import KEY, decide_linear_attention, missing_kernels
    from mmtune.resolve.run import resolve_run
    from mmtune.resolve.target import Target, local_target

    family = FAMILIES["qwen3_5"]
    cpu = decide_linear_attention(family, local_target("cpu"))
    assert cpu.value == "torch fallback" and "CUDA only" in cpu.reason
    h100 = get_gpu("h100")
    planned = decide_linear_attention(family, Target("cuda", h100, "--gpu h100", local=False))
    assert planned.value == "fast kernels if installed there" and "MM343" in planned.reason
    here = decide_linear_attention(family, Target("cuda", h100, "this machine", local=True))
    if missing_kernels(family):  # this machine has neither (a CPU machine): the fallback, with the install line
        assert here.value == "torch fallback" and here.changed
        assert "pip install flash-linear-attention causal-conv1d" in here.reason
    else:
        assert here.value == "fast kernels"
    assert decide_linear_attention(FAMILIES["qwen3_vl"], local_target("cpu")) is None  # no linear layers, nothing said
    run = resolve_run(RunConfig.model_validate({"model": {"name": TWIN}}), local_target("cpu"))
    assert run.decision(KEY) == cpu


def test_lora_reaches_the_linear_layers_projections_not_their_gates():
    from mmtune.adapters import lora_target_names
    from mmtune.models.tiny import build_tiny

    model, _ = build_tiny(TWIN)
    leaves = {n.rsplit(".", 1)[-1] for n in lora_target_names(model, FAMILIES["qwen3_5"], "auto")}
    assert leaves == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                      "in_proj_qkv", "in_proj_z", "out_proj"}
    names = lora_target_names(model, FAMILIES["qwen3_5"], "auto")
    assert all(n.startswith("model.language_model.") for n in names)  # the vision tower's out projections too: no


def test_doctor_names_the_kernels_for_a_gpu_plan(tmp_path):
    import yaml

    from mmtune.doctor.runner import make_context
    from tests.doctor.doctor_helpers import run_codes

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": {"name": TWIN}, "output_dir": str(tmp_path / "run"),
                                    "data": {"train": "synthetic:counting", "synthetic_train_size": 8}}))
    found = [f for f in run_codes(make_context(path, gpu="h100"), "MM343").findings if f.code == "MM343"]
    assert len(found) == 1 and found[0].severity == "info"
    assert "pip install flash-linear-attention causal-conv1d" in found[0].fix
    assert not [f for f in run_codes(make_context(path), "MM343").findings if f.code == "MM343"]  # CPU: nothing


def test_moe_lora_reaches_the_shared_expert_and_no_routed_expert():
    """Qwen3.5-MoE's routed experts are fused 3-D parameters: LoRA goes to the attention, the linear layers'
    projections and the shared expert's dense MLP, by full name, and peft wraps nothing of `mlp.experts`."""
    from mmtune.adapters import apply_adapters
    from mmtune.models.tiny import build_tiny

    model, _ = build_tiny("tiny/qwen3_5_moe")
    cfg = RunConfig.model_validate({"model": {"name": "tiny/qwen3_5_moe"}, "adapter": {"method": "lora"}})
    result = apply_adapters(model, FAMILIES["qwen3_5_moe"], cfg.adapter, cfg.train)
    lora = [n for n, p in result.model.named_parameters() if "lora_" in n]
    assert any(".mlp.shared_expert.gate_proj." in n for n in lora)
    assert any(".linear_attn.in_proj_qkv." in n for n in lora) and any(".self_attn.q_proj." in n for n in lora)
    assert not [n for n in lora if ".mlp.experts." in n or ".mlp.gate." in n or "visual" in n]


def test_doctor_warns_for_a_cuda_run_here_without_the_kernels(tmp_path):
    """The run executing on this machine's CUDA (the resolved run's target, as train resolves it on a GPU machine):
    a warning naming the missing kernels and their install line; nothing where they import."""
    import dataclasses

    import yaml

    from mmtune.doctor.runner import make_context
    from mmtune.gpus import get_gpu
    from mmtune.resolve.linear_attention import missing_kernels
    from mmtune.resolve.target import Target
    from tests.doctor.doctor_helpers import run_codes

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": {"name": TWIN}, "output_dir": str(tmp_path / "run"),
                                    "data": {"train": "synthetic:counting", "synthetic_train_size": 8}}))
    ctx = make_context(path)
    resolved = ctx.need("resolved")
    ctx.put("resolved", dataclasses.replace(resolved, target=Target("cuda", get_gpu("h100"), "this machine", local=True)))
    found = [f for f in run_codes(ctx, "MM343").findings if f.code == "MM343"]
    missing = missing_kernels(FAMILIES["qwen3_5"])
    assert len(found) == (1 if missing else 0)
    if missing:
        assert found[0].severity == "warning" and "torch fallback" in found[0].message
        assert found[0].fix.startswith("pip install " + " ".join(d for _, d, _ in missing))
