"""Model, adapter, gradient and runtime checks on tiny random twins of real architectures."""

from __future__ import annotations

import torch
from doctor_helpers import TINY_VL


def test_good_tiny_vl_has_no_model_errors(doctor):
    rep = doctor(TINY_VL, "MM004", "MM008", "MM010", "MM011", "MM012", "MM013", "MM020", "MM021", "MM022", "MM030")
    assert rep.errors == [] and rep.codes("warning") == set(), rep.findings
    assert not rep.not_run, rep.not_run


def test_mm010_lora_targets_not_found(doctor):
    rep = doctor({**TINY_VL, "adapter": {"target_modules": ["qproj"]}}, "MM010")
    assert [f.code for f in rep.errors] == ["MM010"], rep.findings


def test_mm010_lora_on_the_vision_tower_by_accident(doctor):
    # a module path that happens to be in the vision tower (`vision:qkv` names the component on purpose:
    # an info, tests/doctor/test_false_alarms.py)
    rep = doctor({**TINY_VL, "adapter": {"target_modules": ["model.visual.blocks.0.attn.qkv", "q_proj"]}}, "MM010")
    assert "MM010" in rep.codes("warning"), rep.findings
    assert "vision" in next(f for f in rep.findings if f.severity == "warning").message


def _adapted(cfg_tree):
    from mmtune.config.loader import validate
    from mmtune.doctor.pieces import build_adapted
    from mmtune.resolve import local_target, resolve_run

    return build_adapted(resolve_run(validate(cfg_tree), local_target("cpu")))


def test_mm011_parameter_without_gradient():
    from mmtune.doctor.checks.adapters import no_grad_findings
    from mmtune.doctor.gradflow import example_batches, grad_sources

    a = _adapted(TINY_VL)
    model = a.result.model
    batches = example_batches(a.loaded.processor, a.loaded.family, ["text", "image"])
    _, reached = grad_sources(model, batches, torch.bfloat16)
    assert list(no_grad_findings(reached)) == []
    # the broken setup: a trainable parameter that the forward never uses
    model.base_model.model.lm_head.register_parameter("orphan", torch.nn.Parameter(torch.zeros(3)))
    _, reached = grad_sources(model, batches, torch.bfloat16)
    found = list(no_grad_findings(reached))
    assert len(found) == 1 and "orphan" in found[0].message


def test_mm012_optimizer_groups_by_identity():
    from mmtune.doctor.checks.adapters import identity_findings

    a = _adapted(TINY_VL)
    model, groups = a.result.model, a.result.param_groups
    assert list(identity_findings(model, groups)) == []
    # name-based re-selection after a DDP-style wrap ("module." prefix) finds nothing
    wrapped = {"module." + n: p for n, p in model.named_parameters()}
    by_name = [{"params": [p for n, p in wrapped.items() if n.startswith("base_model.") and p.requires_grad]}]
    assert [f.severity for f in identity_findings(model, by_name)] == ["error"]


def test_mm013_modality_dependent_gradients(doctor):
    # LoRA on the vision tower: its LoRA weights get no gradient from text batches; the run sets DDP
    # find_unused_parameters for them too (build.ddp_unused_components; batch 9 of the public reports): an info
    rep = doctor({**TINY_VL, "adapter": {"target_modules": ["q_proj", "vision:qkv"]}}, "MM013")
    assert rep.codes("info") == {"MM013"} and rep.codes("warning") == set(), rep.findings
    assert "lora_" in rep.findings[-1].where
    assert doctor(TINY_VL, "MM013").findings == []


def test_mm013_components_trained_in_full_on_mixed_data_are_handled(doctor):
    """Was a false alarm: a projector / vision tower trained in full on image + text records gets no
    gradient from text batches, and the run sets DDP find_unused_parameters for exactly this."""
    from mmtune.build import DDP_MAY_BE_UNUSED

    for comps in (["projector"], ["vision"]):
        assert set(comps) <= set(DDP_MAY_BE_UNUSED)
        rep = doctor({**TINY_VL, "adapter": {"train_components": comps}}, "MM013")
        assert rep.codes("warning") == set() and rep.errors == [], rep.findings
        assert "find_unused_parameters=True" in rep.findings[0].message


def test_mm013_reentrant_checkpointing():
    from mmtune.doctor.checks.adapters import reentrant_findings
    from mmtune.models.tiny import build_tiny

    model, _ = build_tiny("tiny/qwen2")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    assert [f.severity for f in reentrant_findings(model)] == ["warning"]
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert list(reentrant_findings(model)) == []


def test_mm004_module_left_in_fp32_and_quantized_vision():
    from mmtune.doctor.checks.loading import dtype_findings

    a = _adapted({**TINY_VL, "train": {"precision": "bf16"}})
    model, fam = a.result.model, a.loaded.family
    assert list(dtype_findings(model, fam, torch.bfloat16, qlora=False)) == []
    model.base_model.model.model.visual.merger.float()
    found = list(dtype_findings(model, fam, torch.bfloat16, qlora=False))
    assert len(found) == 1 and "merger" in found[0].message
    fake = torch.nn.Module()
    fake.register_parameter("w", torch.nn.Parameter(torch.zeros(2, dtype=torch.uint8), requires_grad=False))
    model.base_model.model.model.visual.add_module("q4", fake)
    assert any("quantized" in f.message for f in dtype_findings(model, fam, torch.float32, qlora=True))


def test_mm004_qlora_fp32(doctor):
    rep = doctor({**TINY_VL, "adapter": {"method": "qlora"}, "train": {"precision": "fp32"}}, "MM004")
    assert "MM004" in rep.codes("error")


def test_mm008_meta_parameter():
    from mmtune.doctor.checks.loading import meta_findings
    from mmtune.models.audits import meta_parameters

    a = _adapted(TINY_VL)
    assert list(meta_findings(meta_parameters(a.result.model))) == []
    with torch.device("meta"):
        proj = torch.nn.Linear(4, 4)
    a.result.model.base_model.model.add_module("new_projector", proj)
    assert [f.severity for f in meta_findings(meta_parameters(a.result.model))] == ["error"]


def test_mm020_batches_stay_on_cpu():
    from mmtune.doctor.checks.runtime import batch_device_findings

    assert list(batch_device_findings({"input_ids": torch.zeros(1, 3)})) == []
    assert [f.severity for f in batch_device_findings({"pixel_values": torch.zeros(2, device="meta")})] == ["error"]


def test_mm020_workers_need_picklable_data(doctor):
    rep = doctor({**TINY_VL, "train": {"num_workers": 2}}, "MM020")
    assert rep.errors == [] and not rep.not_run, (rep.findings, rep.not_run)


def test_mm021_output_forms():
    from transformers.modeling_outputs import CausalLMOutput

    from mmtune.doctor.checks.runtime import output_form_findings

    logits = torch.zeros(1, 5, 11)
    assert list(output_form_findings(CausalLMOutput(logits=logits), (1, 5))) == []
    assert list(output_form_findings((torch.zeros(()), logits), (1, 5))) == []
    assert [f.severity for f in output_form_findings((torch.zeros(1, 5),), (1, 5))] == ["error"]


def test_mm022_loss_value():
    from mmtune.doctor.checks.runtime import loss_findings

    assert list(loss_findings(torch.tensor(12.0), 4)) == []
    assert [f.severity for f in loss_findings(torch.tensor(12.0, dtype=torch.float16), 4)] == ["error"]
    assert [f.severity for f in loss_findings(torch.tensor(0.0), 4)] == ["error"]
    assert [f.severity for f in loss_findings(torch.tensor(float("nan")), 4)] == ["error"]
    assert [f.severity for f in loss_findings(torch.tensor(0.0), 0)] == ["error"]


def test_mm030_chat_template():
    from mmtune.doctor.checks.loading import template_findings
    from mmtune.models.tiny import tiny_config_and_processor

    _, tok = tiny_config_and_processor("tiny/qwen2")
    assert list(template_findings(tok)) == []
    tok.chat_template = None
    assert [f.severity for f in template_findings(tok)] == ["error"]


def test_crashing_check_becomes_an_internal_error_finding():
    from mmtune.doctor.context import DoctorContext
    from mmtune.doctor.registry import Check
    from mmtune.doctor.runner import run_checks

    def boom(ctx):
        raise RuntimeError("kaput")

    rep = run_checks(DoctorContext(None), [Check("MM900", "test", boom, (), True, "test", None)])
    assert [(f.code, f.severity) for f in rep.findings] == [("MM099", "error")]
    assert "MM900" in rep.findings[0].message and "kaput" in rep.findings[0].message
