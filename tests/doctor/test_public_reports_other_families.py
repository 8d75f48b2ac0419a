"""Broken setups from the twenty-first batch of public bug reports (docs/doctor.md, "Public bug reports, batch 21:
the other VLM families"): Llama 3.2 Vision's cross-attention LoRA names, Pixtral / Mistral 3 processor geometry,
GLM-4.1V's fused MLP, Phi-4-multimodal's own adapters. Rebuilt on the families' tiny twins; the misses are fixed
(GLM-4.1V's `gate_up_proj` left without LoRA by `target_modules=auto`, MM057 failing every saved Pixtral /
Mistral 3 folder), the rest pinned.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from doctor_helpers import context_for, run_codes  # noqa: E402


def _leaves(names):
    return {n.rsplit(".", 1)[-1] for n in names}


# ----------------------------------------------------------------------------- LoRA names per family
# https://github.com/unslothai/unsloth/issues/1319, https://github.com/2U1/Llama3.2-Vision-Finetune/issues/4:
# which names reach Llama 3.2 Vision's cross-attention layers. https://github.com/ml-explore/mlx-lm/pull/1363,
# https://github.com/hiyouga/LlamaFactory/issues/3069: default LoRA targets that silently leave a decoder linear
# out. GLM-4.1V's decoder fuses gate and up (`mlp.gate_up_proj`): `auto` gave it q/k/v/o and down_proj only.
@pytest.mark.parametrize("tiny", ["tiny/glm4v", "tiny/mllama", "tiny/phi4-multimodal", "tiny/pixtral", "tiny/gemma3",
                                  "tiny/idefics3"])
def test_auto_lora_reaches_every_linear_of_each_decoder_block(tiny):
    from mmtune.adapters import _in_component, _linear_modules, lora_target_names
    from mmtune.models.families import family_for_config
    from mmtune.models.tiny import build_tiny

    model, _ = build_tiny(tiny)
    family = family_for_config(model.config)
    blocks = [n for n in _linear_modules(model) if _in_component(family, n, "decoder") and ".layers." in n]
    chosen = lora_target_names(model, family, "auto")
    assert _leaves(chosen) == _leaves(blocks), sorted(_leaves(blocks) - _leaves(chosen))
    if tiny == "tiny/glm4v":
        assert "gate_up_proj" in _leaves(chosen)
    if tiny == "tiny/mllama":  # the cross-attention layers' projections are decoder linears like the others
        assert any(".cross_attn.q_proj" in n for n in chosen)


def test_a_llama_style_target_list_on_glm4v_names_its_fused_linears():
    from mmtune.adapters import lora_target_names
    from mmtune.errors import ConfigError
    from mmtune.models.families import family_for_config
    from mmtune.models.tiny import build_tiny

    model, _ = build_tiny("tiny/glm4v")
    with pytest.raises(ConfigError) as e:
        lora_target_names(model, family_for_config(model.config),
                          ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    assert "gate_up_proj" in e.value.fix and e.value.where == "adapter.target_modules"


# ----------------------------------------------------------------------------- Pixtral / Mistral 3 geometry
# https://github.com/unslothai/unsloth/issues/2225, https://github.com/huggingface/transformers/pull/37019,
# https://github.com/hiyouga/LlamaFactory/issues/6131: "Image features and image tokens do not match" from a
# processor whose patch arithmetic is not the model's. MM057 compares them, but Pixtral's image processor keeps
# `patch_size` as {"height": 16, "width": 16} (as the published preprocessor_config.json does) and MM057 failed
# every clean saved Pixtral / Mistral 3 folder against the config's 16.
def _saved(tmp_path, tiny, edit=None):
    from mmtune.models.tiny import build_tiny

    folder = tmp_path / "m"
    model, proc = build_tiny(tiny)
    model.save_pretrained(folder)
    proc.save_pretrained(folder)
    if edit:
        path = folder / "processor_config.json"
        raw = json.loads(path.read_text())
        edit(raw)
        path.write_text(json.dumps(raw))
    tree = {"model": {"name": str(folder)}, "data": {"train": "synthetic:counting", "synthetic_train_size": 4}}
    return run_codes(context_for(tmp_path, tree), "MM057")


@pytest.mark.parametrize("tiny", ["tiny/pixtral", "tiny/mistral3"])
def test_mm057_is_silent_on_a_saved_pixtral_folder(tmp_path, tiny):
    report = _saved(tmp_path, tiny)
    assert [f for f in report.findings if f.code == "MM057"] == []


def test_mm057_still_catches_a_pixtral_patch_size_that_is_not_the_models(tmp_path):
    def half(raw):
        raw["image_processor"]["patch_size"] = {"height": 8, "width": 8}

    found = [f for f in _saved(tmp_path, "tiny/pixtral", half).findings if f.code == "MM057"]
    assert len(found) == 1 and "image_processor.patch_size" in found[0].message and "=16" in found[0].message
