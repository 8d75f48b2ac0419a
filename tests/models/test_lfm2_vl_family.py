"""LFM2-VL's facts that the family-parametrised contract tests do not state: packing is refused because the conv
layers read across a packed row's records (shown on the twin, against the same twin with attention layers only),
LoRA's default targets are every Linear of the hybrid decoder and nothing of the tower, the torch-only image
processor's token counts are the model's own arithmetic at the published settings (tiles and thumbnail included),
and a saved processor is rebuilt from its folder with the same encodings."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from mmtune.config.schema import RunConfig
from mmtune.models.families import FAMILIES

TWIN = "tiny/lfm2-vl"


def _second_record_logits(tmp_path, **overrides):
    """The logits of a record alone and of the same record packed after another one, position by position."""
    import torch

    from mmtune.data.packing import pack_row
    from mmtune.loss import model_inputs
    from tests.data.test_packing import _setup

    tmp_path.mkdir()
    model, collate, items = _setup(TWIN, tmp_path, **overrides)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".conv.conv.weight"):  # each tap 1: the window reads its two predecessors in full, not
                p.fill_(1.0)                         # through random init's 0.02-wide weights
    first = items[0]["input_ids"].shape[-1]
    with torch.no_grad():  # use_cache=False as in training: a cache would turn transformers' packed-row mask off
        alone = model(**model_inputs(collate(items[1:2])), use_cache=False).logits[0]
        packed = model(**model_inputs(collate([pack_row(items[:2], None)])), use_cache=False).logits[0, first:]
    return alone, packed


def test_a_packed_row_lets_the_conv_layers_read_the_previous_record(tmp_path):
    # the same twin with attention layers only packs exactly (position_ids restart per record) ...
    alone, packed = _second_record_logits(tmp_path / "attention", layer_types=["full_attention"] * 4)
    assert (alone - packed).abs().max() < 1e-5
    # ... the real conv / attention hybrid does not: the record's first tokens read the previous record's last two,
    # and the attention layer carries that to the rest of the record
    alone, packed = _second_record_logits(tmp_path / "hybrid")
    assert (alone[0] - packed[0]).abs().max() > 1e-2 and (alone[-1] - packed[-1]).abs().max() > 1e-4


def test_packing_is_refused_with_the_families_reason():
    from mmtune.errors import ConfigError
    from mmtune.resolve.decisions import decide_packing

    cfg = RunConfig.model_validate({"model": {"name": TWIN}, "data": {"packing": True}})
    with pytest.raises(ConfigError, match="conv layers") as e:
        decide_packing(cfg, FAMILIES["lfm2_vl"], "sdpa")
    assert "data.packing=false" in str(e.value.fix)


def test_lora_reaches_every_decoder_linear_and_nothing_of_the_tower():
    from mmtune.adapters import lora_target_names
    from mmtune.models.tiny import build_tiny

    model, _ = build_tiny(TWIN)
    names = lora_target_names(model, FAMILIES["lfm2_vl"], "auto")
    assert {n.rsplit(".", 1)[-1] for n in names} == {"q_proj", "k_proj", "v_proj", "out_proj", "in_proj", "w1", "w2", "w3"}
    assert all(n.startswith("model.language_model.") for n in names)  # the tower's q/k/v/out_proj too: no
    linears = {n for n, m in model.named_modules() if type(m).__name__ == "Linear" and n.startswith("model.language_model.")}
    assert set(names) == linears  # the conv blocks' in_proj / out_proj included
    assert any(".conv.in_proj" in n for n in names) and any(".self_attn.out_proj" in n for n in names)


# published settings (models/configs/lfm2-vl-1.6b.json): 64..256 tokens, 512 px tiles, 2..10 of them, a thumbnail
SIZES = [(30, 20), (333, 201), (512, 512), (640, 480), (1280, 960), (3000, 400), (400, 3000), (4000, 4000), (700, 10)]


@pytest.mark.parametrize("size", SIZES)
def test_image_tokens_are_the_models_own_count_at_the_published_settings(size):
    """The processor writes as many `<image>` tokens as the model makes features from the tiles' patch grids
    (Lfm2VlModel.get_image_features: (rows // 2) * (cols // 2) per tile), and a tiled image has its thumbnail."""
    from mmtune.models.configs import embedded
    from mmtune.resolve.processor import stand_in_processor

    proc = stand_in_processor(FAMILIES["lfm2_vl"], embedded("LiquidAI/LFM2-VL-1.6B")["processor"])
    out = proc(images=[[Image.new("RGB", size, (90, 30, 200))]], text=["<image>What is it?"], return_tensors="pt")
    written = int((out["input_ids"] == proc.image_token_id).sum())
    assert written == int((out["spatial_shapes"] // 2).prod(-1).sum())
    assert out["pixel_values"].shape[1] == 1024 and out["pixel_attention_mask"].sum(-1).tolist() == \
        out["spatial_shapes"].prod(-1).tolist()  # each tile's real patches marked, padded to the most
    rows, cols, _ = proc.image_processor.layout(size[1], size[0])
    assert out["pixel_values"].shape[0] == (1 if rows * cols == 1 else rows * cols + 1)
    assert 64 <= int((out["spatial_shapes"][-1] // 2).prod()) <= 256  # the one view or the thumbnail: the budget


def test_a_very_long_thin_image_is_refused_by_name():
    """Past several hundred to one the 32 px floor on the short side leaves more patches than a tile holds."""
    from mmtune.models.configs import embedded
    from mmtune.resolve.processor import stand_in_processor

    proc = stand_in_processor(FAMILIES["lfm2_vl"], embedded("LiquidAI/LFM2-VL-1.6B")["processor"])
    ok = proc(images=[[Image.new("RGB", (8000, 10))]], text=["<image>"], return_tensors="pt")
    # one view of 32 x 8000 px (the 32 px floor; 1000 patches, under the 1024): one token per 32 x 32 px
    assert ok["spatial_shapes"].tolist() == [[2, 500]]
    assert int((ok["input_ids"] == proc.image_token_id).sum()) == (32 // 32) * (8000 // 32)
    with pytest.raises(ValueError, match="1108 patches, over the 1024 a tile holds"):
        proc(images=[[Image.new("RGB", (30000, 100))]], text=["<image>"], return_tensors="pt")


def test_a_saved_processor_is_rebuilt_with_the_same_encodings(tmp_path):
    from mmtune.models.family.lfm2_vl import processor_from_folder
    from mmtune.models.tiny import build_tiny

    _, proc = build_tiny(TWIN)
    proc.save_pretrained(tmp_path)
    again = processor_from_folder(tmp_path)
    image = Image.new("RGB", (333, 201), (10, 200, 30))
    a = proc(images=[[image]], text=["<image>hi"], return_tensors="pt")
    b = again(images=[[image]], text=["<image>hi"], return_tensors="pt")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert again.image_processor.tile_size == proc.image_processor.tile_size
    # saved as transformers' own class (plain AutoProcessor loads the folder where torchvision is installed)
    saved = json.loads((tmp_path / "processor_config.json").read_text())["image_processor"]
    assert saved["image_processor_type"] == "Lfm2VlImageProcessor"


def test_the_hubs_separate_preprocessor_config_is_read(tmp_path):
    """The hub's folders keep the image settings in preprocessor_config.json, beside processor_config.json."""
    from mmtune.models.family.lfm2_vl import processor_from_folder
    from mmtune.models.tiny import build_tiny

    _, proc = build_tiny(TWIN)
    proc.save_pretrained(tmp_path)
    spec = json.loads((tmp_path / "processor_config.json").read_text())
    image = spec.pop("image_processor")
    (tmp_path / "processor_config.json").write_text(json.dumps(spec))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({**image, "max_image_tokens": 9}))
    assert processor_from_folder(tmp_path).image_processor.max_image_tokens == 9


def test_the_run_says_what_an_image_costs():
    """The image budget is the processor's, in tokens, not a pixel cap: the resolved run says it (decide once)."""
    from mmtune.resolve import local_target, resolve_run

    run = resolve_run(RunConfig.model_validate({"model": {"name": "LiquidAI/LFM2-VL-1.6B"}}), local_target("cpu"))
    said = run.decision("image tokens").value
    assert said.startswith("64..256 tokens an image (one per 32x32 px)") and "2..10 of 256 tokens + a thumbnail" in said
    other = resolve_run(RunConfig.model_validate({"model": {"name": "tiny/qwen2-vl"}}), local_target("cpu"))
    assert other.decision("image tokens") is None
