"""Clean setups the doctor used to flag (issue 14), each with the broken neighbour that must still fire."""

from __future__ import annotations

import json

import pytest

GRAD = ("MM002", "MM010", "MM011", "MM013")  # MM002 first: the scan tells MM011/MM013 which batch kinds exist


@pytest.fixture
def records(tmp_path):
    from PIL import Image

    Image.new("RGB", (56, 56), "white").save(tmp_path / "a.png")

    def write(n_text, n_image, name="train.jsonl"):
        with open(tmp_path / name, "w") as f:
            for i in range(n_text):
                f.write(json.dumps({"messages": [{"role": "user", "content": f"Say {i}"},
                                                 {"role": "assistant", "content": str(i)}]}) + "\n")
            for i in range(n_image):
                f.write(json.dumps({"messages": [{"role": "user", "content": "<image>How many?"},
                                                 {"role": "assistant", "content": str(i)}], "images": ["a.png"]}) + "\n")
        return str(tmp_path / name)

    return write


def _quiet(rep):
    return [f for f in rep.findings if f.severity != "info"]


@pytest.mark.parametrize("targets", [
    ["language_model.model.layers.1.self_attn.q_proj", "language_model.model.layers.1.self_attn.v_proj"],  # 4.x
    ["language_model.layers.0.self_attn.q_proj"],  # a dotted suffix, as peft matches it
    r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj)",  # HF's LLaVA LoRA example: one regex string
    "q_proj",  # a lone name as a string
])
def test_llava_decoder_lora_names(doctor, targets):
    from mmtune.doctor.checks.adapters import lora_components

    tree = {"model": {"name": "tiny/llava"}, "data": {"train": "synthetic:counting", "synthetic_train_size": 4},
            "adapter": {"target_modules": targets}}
    rep = doctor(tree, "MM019", "MM010")
    assert _quiet(rep) == [], rep.findings
    from mmtune.adapters import apply_adapters
    from mmtune.config.loader import validate
    from mmtune.models.families import get_family
    from mmtune.models.tiny import build_tiny

    cfg = validate({**tree, "output_dir": "unused"})
    model, _ = build_tiny("tiny/llava")
    fam = get_family("llava")
    res = apply_adapters(model, fam, cfg.adapter)
    assert set(lora_components(res.model, fam)) == {"decoder"}  # the decoder only, as meant


def test_llava_lora_name_that_matches_nothing_still_errors(doctor):
    tree = {"model": {"name": "tiny/llava"}, "data": {"train": "synthetic:counting", "synthetic_train_size": 4},
            "adapter": {"target_modules": ["language_model.model.layers.1.self_attn.qq_proj"]}}
    assert doctor(tree, "MM010").codes("error") == {"MM010"}


@pytest.mark.parametrize("model", ["tiny/qwen2-vl", "tiny/llava"])
def test_full_fine_tuning_of_a_vlm_on_text_only_data(doctor, records, model):
    rep = doctor({"model": {"name": model}, "data": {"train": records(4, 0), "format": "messages"},
                  "adapter": {"method": "full"}}, *GRAD)
    assert _quiet(rep) == [], rep.findings
    note = next(f for f in rep.findings if f.code == "MM011" and "media the data does not hold" in f.message)
    assert "vision" in note.fix


@pytest.mark.parametrize("model", ["tiny/qwen2-vl", "tiny/llava"])
def test_vision_tower_trained_on_mixed_image_and_text_records(doctor, records, model):
    rep = doctor({"model": {"name": model}, "data": {"train": records(3, 3), "format": "messages"},
                  "adapter": {"train_components": ["vision"]}}, *GRAD)
    assert _quiet(rep) == [], rep.findings
    if model == "tiny/llava":  # vision_feature_layer=-2: the last vision layer is unused by design
        assert any("unused by the model's own forward" in f.message for f in rep.findings)


def test_mm011_still_errors_when_the_setup_cuts_the_graph():
    from mmtune.doctor.checks.adapters import classify_dead, no_grad_findings

    dead = ["base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight", "visual.blocks.1.w",
            "visual.post_norm.w"]
    plain = {dead[0]: {"text", "image"}, dead[1]: {"image"}, dead[2]: set()}
    unused, elsewhere, cut = classify_dead(dead, plain, ["text"])
    assert (unused, elsewhere, cut) == ([dead[2]], [dead[1]], [dead[0]])
    assert [f.severity for f in no_grad_findings({n: set() for n in cut})] == ["error"]
    # with image batches in the data the vision weight is cut too
    assert classify_dead(dead, plain, ["text", "image"])[2] == dead[:2]


def test_lora_on_a_component_named_in_target_modules(doctor):
    """Was a false alarm on recipes/seed002: `vision[-2:]:q_proj` asks for LoRA on the vision tower."""
    base = {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": "synthetic:counting", "synthetic_train_size": 4}}
    rep = doctor({**base, "adapter": {"target_modules": ["q_proj", "vision[-1:]:qkv"]}}, "MM010")
    assert _quiet(rep) == [] and any("as adapter.target_modules names it" in f.message for f in rep.findings)
    # reached by a path the user did not mean as the vision tower: still a warning
    rep = doctor({**base, "adapter": {"target_modules": ["q_proj", "model.visual.blocks.0.attn.qkv"]}}, "MM010")
    assert rep.codes("warning") == {"MM010"}, rep.findings
