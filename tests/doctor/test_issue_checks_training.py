"""MM038, MM039, MM041, MM042: adapter, precision and learning-rate checks from public issue threads.

The premise of each error is shown on the tiny twin (the run really fails that way); the check is then
run on the broken config and on clean ones beside it.
"""

from __future__ import annotations

import pytest
from doctor_helpers import TINY_VL

QWEN2_VL_7B = {"model": {"name": "Qwen/Qwen2-VL-7B-Instruct"}, "data": {"train": "synthetic:counting"}}


def _build(tree):
    from mmtune.config.loader import validate
    from mmtune.doctor.pieces import build_adapted
    from mmtune.resolve import local_target, resolve_run

    return build_adapted(resolve_run(validate(tree), local_target("cpu")))


# --------------------------------------------------------------------------- MM038

def test_mm038_premise_decoder_in_full_leaves_lora_nothing():
    with pytest.raises(Exception, match="No modules were targeted for adaptation"):
        _build({**TINY_VL, "adapter": {"train_components": ["decoder"]}})


def test_mm038_decoder_trained_in_full_with_lora(doctor):
    rep = doctor({**TINY_VL, "adapter": {"train_components": ["decoder"]}}, "MM038")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM038", "error")]
    assert rep.findings[0].where == "adapter.train_components"


def test_mm038_lora_named_on_a_component_trained_in_full(doctor):
    tree = {**TINY_VL, "adapter": {"train_components": ["vision"], "target_modules": ["q_proj", "vision:qkv"]}}
    from mmtune.adapters import is_lora_param

    a = _build(tree)  # the premise: peft builds, but puts no LoRA weight in the vision tower
    assert not [n for n, _ in a.result.model.named_parameters() if is_lora_param(n) and ".visual." in n]
    rep = doctor(tree, "MM038")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM038", "warning")] and "vision:qkv" in rep.findings[0].message


@pytest.mark.parametrize("adapter", [
    {}, {"train_components": ["projector"]}, {"method": "full"},
    {"target_modules": ["q_proj", "vision:qkv"]},  # LoRA on the tower, not trained in full: no overlap
    {"train_components": ["vision"], "freeze_components": []},
])
def test_mm038_clean(doctor, adapter):
    assert doctor({**TINY_VL, "adapter": adapter}, "MM038").findings == []


# --------------------------------------------------------------------------- MM039

QLORA_STAGES = {"stages": [{"until": 2, "train": ["projector"]}, {"train": ["decoder_last_1", "lora"]}]}


def test_mm039_qlora_stage_trains_4bit_blocks(doctor):
    with pytest.raises(RuntimeError, match="floating point dtype can require gradients"):  # the premise
        _build({**TINY_VL, "adapter": {"method": "qlora"}, "train": QLORA_STAGES})
    rep = doctor({**TINY_VL, "adapter": {"method": "qlora"}, "train": QLORA_STAGES}, "MM039")
    assert [(f.code, f.severity, f.where) for f in rep.findings] == [("MM039", "error", "train.stages[1].train")]


def test_mm039_clean(doctor):
    assert doctor({**TINY_VL, "adapter": {"method": "lora"}, "train": QLORA_STAGES}, "MM039").findings == []
    ok = {"stages": [{"until": 2, "train": ["projector"]}, {"train": ["decoder_lora", "projector"]}]}
    assert doctor({**TINY_VL, "adapter": {"method": "qlora"}, "train": ok}, "MM039").findings == []


# --------------------------------------------------------------------------- MM041

def test_mm041_qwen2_5_vl_in_fp16_on_a_t4(doctor):
    """bf16 asked for, on a T4: the run decides fp16 + GradScaler, and Qwen2.5-VL's ViT overflows there."""
    tree = {**QWEN2_VL_7B, "model": {"name": "Qwen/Qwen2.5-VL-7B-Instruct"}}
    rep = doctor(tree, "MM041", gpu="t4")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM041", "warning")], (rep.findings, rep.not_run)
    assert "bf16 unsupported on T4" in rep.findings[0].message and "llama.cpp#17534" in rep.findings[0].message


def test_mm041_qwen2_vl_in_fp16_is_an_info(doctor):
    """Qwen2-VL's fp16 overflow (transformers#33294) was fixed in transformers' eager path: said, not warned."""
    rep = doctor({**QWEN2_VL_7B, "train": {"precision": "fp16"}}, "MM041", gpu="t4")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM041", "info")]


def test_mm041_clean(doctor):
    assert doctor(QWEN2_VL_7B, "MM041", gpu="a100-80gb").findings == []  # bf16
    seed001 = {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"}, "train": {"precision": "fp16"}}
    assert doctor(seed001, "MM041", gpu="quadro-rtx-6000").findings == []  # text-only Qwen2.5 in fp16
    assert doctor({**TINY_VL, "train": {"precision": "fp16"}}, "MM041", gpu="t4").findings == []  # random init


# --------------------------------------------------------------------------- MM042

@pytest.mark.parametrize("adapter,train", [
    ({"train_components": ["vision"]}, {"lr": 2e-4}),
    ({"method": "full", "lr_multipliers": {"vision": 10}}, {"lr": 2e-5}),
    ({}, {"lr": 2e-4, "stages": [{"until": 5, "train": ["projector"]}, {"train": ["lora", "vision_last_2"]}]}),
])
def test_mm042_encoder_in_full_at_a_lora_rate(doctor, adapter, train):
    rep = doctor({**QWEN2_VL_7B, "adapter": adapter, "train": train}, "MM042")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM042", "warning")], rep.findings
    key, value = rep.findings[0].fix.split("=")
    assert key == "adapter.lr_multipliers.vision" and train["lr"] * float(value) < 1e-4  # the fix is encoder-sized


@pytest.mark.parametrize("adapter,train", [
    ({"train_components": ["vision"], "lr_multipliers": {"vision": 0.05}}, {"lr": 2e-4}),
    ({"train_components": ["projector"]}, {"lr": 2e-4}),  # the projector may move fast (LLaVA stage 1: 1e-3)
    ({"method": "full"}, {"lr": 2e-4}),  # full fine-tuning at 2e-4 is MM032's finding, said once
    ({"method": "full", "freeze_components": ["vision"]}, {"lr": 1e-3}),
    ({}, {"lr": 2e-5, "stages": [{"until": 5, "train": ["projector"]},  # seed 003's shape
                                 {"train": ["lora", "vision_last_2"], "lr_multiplier": 0.5}]}),
])
def test_mm042_clean(doctor, adapter, train):
    assert doctor({**QWEN2_VL_7B, "adapter": adapter, "train": train}, "MM042").findings == []
    assert doctor({**TINY_VL, "adapter": {"train_components": ["vision"]}, "train": {"lr": 1e-3}}, "MM042").findings == []


# --------------------------------------------------------------------------- MM056

def test_mm056_premise_trainer_keeps_embedding_states_in_32_bit():
    import inspect

    from transformers import Trainer

    assert 'register_module_override(module, "weight", {"optim_bits": 32})' in inspect.getsource(Trainer)


def test_mm056_8bit_adam_on_embeddings_trained_in_full(doctor):
    rep = doctor({**TINY_VL, "adapter": {"method": "full"}, "train": {"optimizer": "adamw_8bit"}}, "MM056")
    assert [(f.code, f.severity, f.fix.split(" ")[0]) for f in rep.findings] == [
        ("MM056", "warning", "train.optimizer=adamw")]


@pytest.mark.parametrize("adapter,train", [
    ({"method": "full"}, {"optimizer": "adamw"}),
    ({"method": "full", "freeze_components": ["decoder"]}, {"optimizer": "adamw_8bit"}),
    ({"method": "qlora"}, {"optimizer": "adamw_8bit"}),  # the T4 profile: LoRA weights only
    ({"train_components": ["projector"]}, {"optimizer": "adamw_8bit"}),
])
def test_mm056_clean(doctor, adapter, train):
    assert doctor({**TINY_VL, "adapter": adapter, "train": train}, "MM056").findings == []
