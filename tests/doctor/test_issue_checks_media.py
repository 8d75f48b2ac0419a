"""MM057-MM059: processor geometry against the model config, pure-bf16 steps, pixel caps (public issue threads).

Each test shows the premise (what really happens) where it can run on CPU, then the check on the broken
setup and on clean ones beside it.
"""

from __future__ import annotations

import copy

import pytest
from doctor_helpers import TINY_VL, context_for, run_codes

VL_FAMILIES = ("tiny/qwen2-vl", "tiny/qwen2.5-vl", "tiny/llava", "tiny/llava-next", "tiny/llava-onevision")


def _tree(name):
    return {**TINY_VL, "model": {"name": name}}


# --------------------------------------------------------------------------- MM057

def test_mm057_premise_llava_processor_with_a_siglip_count():
    """transformers#34447: the processor's num_additional_image_tokens does not match the tower's CLS tokens:
    the processor writes one token more than the encoder returns, and the model's forward stops."""
    import torch
    from PIL import Image
    from transformers import LlavaForConditionalGeneration

    from mmtune.models.tiny import tiny_config_and_processor

    hf, proc = tiny_config_and_processor("tiny/llava")
    model = LlavaForConditionalGeneration(hf).eval()
    proc = copy.deepcopy(proc)
    proc.num_additional_image_tokens = 2
    batch = proc(text=["<image> what?"], images=[Image.new("RGB", (56, 56))], return_tensors="pt")
    with pytest.raises(ValueError, match="Image features and image tokens do not match"), torch.no_grad():
        model(**batch)


@pytest.mark.parametrize("name,mutate,key", [
    # transformers#34447: CLS count of a CLIP tower (1) written as SigLIP's (0)
    ("tiny/llava", lambda p: setattr(p, "num_additional_image_tokens", 0), "num_additional_image_tokens"),
    # transformers#32395 / #36002: the processor's select strategy or patch size is not the model's
    ("tiny/llava", lambda p: setattr(p, "vision_feature_select_strategy", "full"), "vision_feature_select_strategy"),
    ("tiny/llava-next", lambda p: setattr(p, "patch_size", 28), "processor.patch_size"),
    ("tiny/llava-next", lambda p: setattr(p.image_processor, "image_grid_pinpoints", [[56, 112]]), "image_grid_pinpoints"),
    # Qwen2-VL processor from another config: spatial merge 2 vs 1
    ("tiny/qwen2-vl", lambda p: setattr(p.image_processor, "merge_size", 1), "image_processor.merge_size"),
])
def test_mm057_processor_geometry_differs_from_the_model(tmp_path, name, mutate, key):
    rep = run_codes(context_for(tmp_path, _tree(name), mutate), "MM057")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM057", "error")], (rep.findings, rep.not_run)
    assert key in rep.findings[0].message and "do not match" in rep.findings[0].message


@pytest.mark.parametrize("name", VL_FAMILIES)
def test_mm057_clean_on_every_tiny_family(tmp_path, name):
    rep = run_codes(context_for(tmp_path, _tree(name)), "MM057")
    assert rep.findings == [] and rep.not_run == []


# --------------------------------------------------------------------------- MM058

@pytest.mark.parametrize("lr,moves", [(1e-5, False), (5e-5, False), (2e-4, True)])
def test_mm058_premise_bf16_weights_ignore_small_adam_steps(lr, moves):
    """transformers#21312 / optimi's Kahan summation: AdamW on bf16 weights without master copies."""
    import torch

    p = torch.nn.Parameter(torch.full((8,), 0.02, dtype=torch.bfloat16))
    start = p.detach().clone()
    opt = torch.optim.AdamW([p], lr=lr, weight_decay=0.0)
    for _ in range(20):
        p.grad = torch.ones_like(p)
        opt.step()
    assert bool((p != start).any()) is moves


def test_mm058_pure_bf16_at_a_small_lr(doctor):
    rep = doctor({**TINY_VL, "adapter": {"method": "full"}, "train": {"fp32_trainable": False, "lr": 1e-5}}, "MM058")
    assert [(f.code, f.severity, f.where) for f in rep.findings] == [("MM058", "warning", "train.fp32_trainable")]
    assert "0.0039" in rep.findings[0].message


@pytest.mark.parametrize("train", [{"fp32_trainable": False, "lr": 2e-4}, {"lr": 1e-5}, {}])
def test_mm058_clean(doctor, train):
    assert doctor({**TINY_VL, "train": train}, "MM058").findings == []


# --------------------------------------------------------------------------- MM059

def test_mm059_premise_smart_resize_grows_past_max():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    h, w = smart_resize(56, 56, factor=28, min_pixels=200704, max_pixels=50176)
    assert h * w > 50176


def test_mm059_min_above_max(doctor):
    rep = doctor({**TINY_VL, "model": {"name": "tiny/qwen2-vl", "min_pixels": 12544, "max_pixels": 6272}}, "MM059")
    assert [(f.code, f.severity, f.where) for f in rep.findings] == [("MM059", "warning", "model.min_pixels")]


def test_mm059_max_below_the_processors_default_min(doctor):
    rep = doctor({**TINY_VL, "model": {"name": "tiny/qwen2-vl", "max_pixels": 1568}}, "MM059")
    assert [(f.code, f.severity, f.where) for f in rep.findings] == [("MM059", "warning", "model.max_pixels")]
    assert "default min_pixels" in rep.findings[0].message


@pytest.mark.parametrize("model", [{"name": "tiny/qwen2-vl"}, {"name": "tiny/qwen2-vl", "max_pixels": 12544},
                                   {"name": "tiny/qwen2-vl", "min_pixels": 3136, "max_pixels": 3136},
                                   {"name": "tiny/llava"}])
def test_mm059_clean(doctor, model):
    assert doctor({**TINY_VL, "model": model}, "MM059").findings == []


# --------------------------------------------------------------------------- MM067

def test_mm067_premise_clip_processor_ignores_a_pixel_budget(tmp_path):
    """transformers#41955: a max_pixels the processor does not use is accepted and silently ignored."""
    from PIL import Image

    from mmtune.models.tiny import tiny_config_and_processor
    from mmtune.resolve.processor import read_pixel_caps, set_pixel_caps

    proc = copy.deepcopy(tiny_config_and_processor("tiny/llava")[1])
    set_pixel_caps(proc, None, 784)
    assert read_pixel_caps(proc) == {}
    out = proc.image_processor(Image.new("RGB", (224, 224)), return_tensors="pt")
    assert tuple(out["pixel_values"].shape[-2:]) == (56, 56)  # the processor's crop, not 784 pixels


@pytest.mark.parametrize("name", ["tiny/llava", "tiny/llava-next"])
def test_mm067_max_pixels_on_a_fixed_size_processor(doctor, name):
    rep = doctor({**TINY_VL, "model": {"name": name, "max_pixels": 50176}}, "MM067")
    assert [(f.code, f.severity, f.where) for f in rep.findings] == [("MM067", "warning", "model.max_pixels")]
    assert "no effect" in rep.findings[0].message


@pytest.mark.parametrize("model", [{"name": "tiny/llava"}, {"name": "tiny/qwen2-vl", "max_pixels": 12544},
                                   {"name": "tiny/qwen2-vl"}])
def test_mm067_clean(doctor, model):
    assert doctor({**TINY_VL, "model": model}, "MM067").findings == []
