"""Broken setups from the forty-seventh batch of public bug reports (docs/doctor.md, "Public bug reports, batch 47:
gradient checkpointing: frozen inputs, reentrant variants, vision towers and DDP"), rebuilt on the tiny twins.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mmtune.build import build_run
from mmtune.config.loader import load_config
from tests.family_registry import DATA

pytestmark = pytest.mark.filterwarnings("ignore")


def _run(tmp_path: Path, twin: str, adapter: dict, checkpointing: bool = True, data: str = "image_qa.jsonl"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"), "model": {"name": twin, "gradient_checkpointing": checkpointing},
        "data": {"train": str(DATA / data), "media_root": str(DATA)},
        "adapter": {"r": 4, "dropout": 0.0, **adapter},
        "train": {"max_steps": 1, "micro_batch_size": 1, "precision": "fp32", "device": "cpu", "seed": 0},
        "logging": {"tensorboard": False}}))
    return build_run(load_config(cfg, []), with_optimizer=False)


def _calls_in_one_step(run, module) -> int:
    """How many times `module` runs in one forward + backward of the run's first record (2: checkpointed)."""
    calls = []
    hook = module.register_forward_pre_hook(lambda *a: calls.append(1))  # a post-hook misses the recomputation's early stop
    model = run.unwrapped_model()
    model.zero_grad()
    model(**run.collator([run.encoder.encode(run.train_set.records[0])])).loss.backward()
    hook.remove()
    return len(calls)


# ----------------------------------------------------------------------------- Mllama's vision layers
# https://github.com/unslothai/unsloth-zoo/pull/264 (Llama 3.2 Vision OOM after transformers' checkpointing refactor),
# https://github.com/modelscope/ms-swift/issues/1928, https://github.com/huggingface/transformers/pull/34724 (a vision
# tower left out of checkpointing: "开启视觉模块微调之后显存溢出", OOM once the tower is trained). transformers 5 sets
# MllamaVisionEncoder.gradient_checkpointing but its plain layers never read it: a trained tower kept every
# activation while the run said "gradient checkpointing: on". Now they are checkpointed (models/left_out_layers.py)
# and the decision names them.

def test_mllama_vision_layers_are_checkpointed_when_the_tower_trains(tmp_path):
    run = _run(tmp_path, "tiny/mllama", {"method": "full"})
    base = run.unwrapped_model()
    vision = base.model.vision_model
    assert any(p.requires_grad for p in vision.parameters())
    # recomputed in backward: the layer's MLP runs twice, as a checkpointed decoder layer's does
    assert _calls_in_one_step(run, vision.transformer.layers[0].mlp) == 2
    assert _calls_in_one_step(run, vision.global_transformer.layers[0].mlp) == 2
    assert _calls_in_one_step(run, base.model.language_model.layers[0].mlp) == 2
    line = next(d for d in run.decisions if d.startswith("gradient checkpointing:"))
    assert "model.vision_model.transformer.layers" in line and "model.vision_model.global_transformer.layers" in line


def test_phi4_audio_conformer_is_checkpointed_by_the_same_rule(tmp_path):
    run = _run(tmp_path, "tiny/phi4-multimodal", {"method": "full"}, data="audio_qa.jsonl")
    layer = run.unwrapped_model().get_submodule("model.embed_tokens_extend.audio_embed.encoder.encoders")[0]
    assert _calls_in_one_step(run, next(layer.children())) == 2
    line = next(d for d in run.decisions if d.startswith("gradient checkpointing:"))
    assert "model.embed_tokens_extend.audio_embed.encoder.encoders" in line


def test_mllama_checkpointed_vision_gives_the_same_gradients(tmp_path):
    import torch

    grads = []
    for on in (True, False):
        run = _run(tmp_path / str(on), "tiny/mllama", {"method": "full"}, checkpointing=on)
        model = run.unwrapped_model()
        if not on:
            assert _calls_in_one_step(run, model.model.vision_model.transformer.layers[0].mlp) == 1
        model.zero_grad()
        model(**run.collator([run.encoder.encode(run.train_set.records[0])])).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if "vision_model" in n and p.grad is not None})
    assert grads[0] and grads[0].keys() == grads[1].keys()
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n], rtol=1e-5, atol=1e-6)



# ----------------------------------------------------------------------------- LoRA on the vision tower
# https://github.com/2U1/Qwen-VL-Series-Finetune/issues/193, https://github.com/unslothai/unsloth/issues/5039,
# https://github.com/locuslab/open-unlearning/issues/178, https://github.com/NVIDIA-TAO/tao-pytorch/pull/106: LoRA on
# the tower (or behind frozen inputs) with reentrant checkpointing, or the input-grad hook on the wrong sub-model:
# the vision LoRA weights got no gradient and stayed at their init. mmtune checkpoints non-reentrant, so a LoRA
# weight inside a checkpointed block gets its gradient whether the block's input requires grad or not.

def test_vision_lora_gets_gradients_through_checkpointed_blocks(tmp_path):
    run = _run(tmp_path, "tiny/qwen2-vl", {"method": "lora", "target_modules": ["q_proj", "v_proj", "vision:qkv"]})
    model = run.unwrapped_model()
    blocks = model.get_base_model().model.visual.blocks
    assert _calls_in_one_step(run, blocks[0].mlp) == 2  # the tower's blocks are checkpointed
    vision_b = {n: p.grad for n, p in model.named_parameters() if "lora_B" in n and "visual" in n}
    assert vision_b and all(g is not None and float(g.abs().sum()) > 0 for g in vision_b.values())


# ----------------------------------------------------------------------------- checkpointing keys of other tools
# https://github.com/huggingface/peft/pull/1036, https://github.com/huggingface/trl/pull/1118,
# https://github.com/huggingface/peft/issues/1142 (gradient_checkpointing_kwargs={"use_reentrant": ...} carried
# between scripts: reentrant computes no LoRA gradients behind frozen inputs, non-reentrant was the fix);
# https://github.com/pytorch/pytorch/issues/97436, https://github.com/pytorch/pytorch/issues/121966 (torch_compile
# with checkpointing); https://github.com/hiyouga/LlamaFactory/issues/1161 (use_cache in a training config).
# The base answered use_reentrant "remove it", torch_compile "did you mean train.loss_impl?", use_cache "did you
# mean model.name?", and gradient_checkpointing_kwargs only with the key's name, its choice unsaid.

@pytest.mark.parametrize("key, value, ours", [
    ("gradient_checkpointing_kwargs", {"use_reentrant": True}, "model.gradient_checkpointing"),
    ("model.use_reentrant", True, "model.gradient_checkpointing"),
    ("fsdp_activation_checkpointing", True, "model.gradient_checkpointing"),
])
def test_reentrant_settings_are_answered_with_the_one_checkpointing_key(tmp_path, key, value, ours):
    from doctor_helpers import refusal_of_key

    text = refusal_of_key(tmp_path, key, value)
    assert f"did you mean '{ours}'" in text and "always non-reentrant" in text


@pytest.mark.parametrize("key, wrong", [("train.torch_compile", "train.loss_impl"), ("model.use_cache", "model.name")])
def test_compile_and_cache_keys_are_not_answered_with_an_unrelated_key(tmp_path, key, wrong):
    from doctor_helpers import refusal_of_key

    text = refusal_of_key(tmp_path, key, True)
    assert wrong not in text and "remove it" in text
    assert ("not compiled" if "compile" in key else "use_cache=False themselves") in text


# ----------------------------------------------------------------------------- FSDP activation checkpointing twice
# https://github.com/huggingface/transformers/pull/31578, https://github.com/huggingface/transformers/issues/32073,
# https://github.com/huggingface/accelerate/issues/1732: accelerate's fsdp_activation_checkpointing beside the
# model's own checkpointing (a second wrapper). MM413 already refuses an accelerate FSDP launch (fast: `mmtune train`
# stops at start); its message now names that setting with the others the run decides itself.

def test_mm413_names_accelerates_activation_checkpointing(tmp_path, monkeypatch):
    from doctor_helpers import context_for, run_codes
    from test_public_reports_batch44 import FSDP_LAUNCH, TINY_VL

    for k, v in {**FSDP_LAUNCH, "FSDP_ACTIVATION_CHECKPOINTING": "true"}.items():
        monkeypatch.setenv(k, v)
    found = run_codes(context_for(tmp_path, TINY_VL), "MM413").findings
    assert [(f.code, f.severity) for f in found] == [("MM413", "error")]
    assert "fsdp_activation_checkpointing=true" in " ".join(found[0].message.split())


# ----------------------------------------------------------------------------- a class without checkpointing
# https://github.com/huggingface/transformers/issues/9113, https://github.com/huggingface/transformers/issues/18513
# ("ValueError: ... does not support gradient checkpointing"; some models silently did not checkpoint). mmtune
# skips the call on such a class, but said nothing: a day-0 JetMoe (supports_gradient_checkpointing=False) with
# model.gradient_checkpointing=true had no checkpointing line among the run's decisions, and the user read the
# config as on. Now the decision says off and why.

def test_a_class_without_checkpointing_is_said_off(tmp_path):
    from doctor_helpers import sums_jsonl
    from transformers import JetMoeConfig, JetMoeForCausalLM

    from mmtune.models.tiny import tiny_config_and_processor

    _, tok = tiny_config_and_processor("tiny/qwen2")
    config = JetMoeConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, kv_channels=8, num_key_value_heads=2,
                          intermediate_size=64, num_local_experts=2, num_experts_per_tok=1, max_position_embeddings=256)
    JetMoeForCausalLM(config).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"), "model": {"name": str(tmp_path / "m"), "gradient_checkpointing": True},
        "data": {"train": sums_jsonl(tmp_path), "max_length": 64}, "adapter": {"method": "lora", "r": 4, "dropout": 0.0},
        "train": {"max_steps": 1, "micro_batch_size": 1, "precision": "fp32", "device": "cpu"},
        "logging": {"tensorboard": False}}))
    run = build_run(load_config(cfg, []), with_optimizer=False)
    lines = [d for d in run.decisions if d.startswith("gradient checkpointing:")]
    assert len(lines) == 1 and "off: JetMoeForCausalLM does not support it" in lines[0]
