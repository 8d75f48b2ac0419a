"""compat/pixtral.py: transformers' own PixtralProcessor (Mistral 3, Pixtral-12B) without torchvision, and the
[IMG] / [IMG_BREAK] / [IMG_END] expansion it writes checked against the image processor's output shape."""

from __future__ import annotations

import json
import pickle
import sys

import pytest
from PIL import Image

from mmtune.compat import CompatError
from mmtune.compat.pixtral import helper_sources, pixtral_processor_class, torchvision_missing
from mmtune.models.tiny import tiny_config_and_processor

SIZES = [(60, 100), (112, 112), (150, 90), (30, 30), (400, 200), (29, 57)]  # (height, width), some > the long edge


def test_the_pil_helper_is_the_torchvision_modules_helper():
    tv, pil = helper_sources()
    assert "def get_resize_output_image_size" in tv and "def _num_image_tokens" in tv
    assert tv == pil  # a transformers release where the two part breaks the torchvision-free route: fails here


def test_the_real_class_leaves_no_alias_and_saves_as_the_librarys(tmp_path):
    cls = pixtral_processor_class()
    assert cls.__name__ == "PixtralProcessor"
    assert [c.__module__ for c in cls.__mro__ if c.__name__ == "PixtralProcessor"][-1] == \
        "transformers.models.pixtral.processing_pixtral"  # the library's own class (or a subclass of it)
    if torchvision_missing():
        assert "transformers.models.pixtral.image_processing_pixtral" not in sys.modules  # the alias is gone
    _, proc = tiny_config_and_processor("tiny/mistral3")
    assert type(pickle.loads(pickle.dumps(proc))) is type(proc)  # DataLoader workers receive it pickled
    proc.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "processor_config.json").read_text())["processor_class"] == "PixtralProcessor"


@pytest.mark.parametrize("hw", SIZES)
def test_expansion_matches_the_image_processor_output(hw):
    _, proc = tiny_config_and_processor("tiny/mistral3")
    tok = proc.tokenizer
    out = proc(text=["a [IMG] b"], images=[Image.new("RGB", (hw[1], hw[0]), (90, 20, 200))], return_tensors="pt")
    grid = proc.patch_size * proc.spatial_merge_size
    h, w = (int(x) for x in out["image_sizes"][0])
    assert tuple(out["pixel_values"].shape[-2:]) == (h, w) and h % grid == 0 and w % grid == 0
    assert max(h, w) <= proc.image_processor.size.longest_edge + grid - 1  # never past the long edge's grid
    rows, cols = h // grid, w // grid
    ids = out["input_ids"][0].tolist()
    count = {t: ids.count(tok.convert_tokens_to_ids(t)) for t in ("[IMG]", "[IMG_BREAK]", "[IMG_END]")}
    assert count == {"[IMG]": rows * cols, "[IMG_BREAK]": rows - 1, "[IMG_END]": 1}
    # the arithmetic the processor answers without pixels agrees with what it wrote
    assert proc._get_num_multimodal_tokens(image_sizes=[list(hw)]).num_image_tokens == [(cols + 1) * rows]


def test_the_tiny_model_takes_one_feature_per_img_token():
    import torch

    from mmtune.models.tiny import build_tiny

    model, proc = build_tiny("tiny/mistral3")
    out = proc(text=["a [IMG] b [IMG]"], images=[[Image.new("RGB", (100, 60)), Image.new("RGB", (40, 90))]],
               return_tensors="pt")
    with torch.no_grad():
        feats = model.model.get_image_features(pixel_values=out["pixel_values"], image_sizes=out["image_sizes"])
    n_img = int((out["input_ids"] == model.config.image_token_index).sum())
    assert sum(f.shape[0] for f in feats.pooler_output) == n_img


def test_saved_folder_reloads_in_both_layouts(tmp_path):
    from mmtune.models.processor_loading import pixtral_without_torchvision

    _, proc = tiny_config_and_processor("tiny/mistral3")
    proc.save_pretrained(tmp_path / "t5")
    # the hub's layout: the image processor's settings in preprocessor_config.json, the processor's beside them
    hub = tmp_path / "hub"
    proc.save_pretrained(hub)
    spec = json.loads((hub / "processor_config.json").read_text())
    (hub / "preprocessor_config.json").write_text(json.dumps({**spec.pop("image_processor"),
                                                             "processor_class": "PixtralProcessor"}))
    (hub / "processor_config.json").write_text(json.dumps(spec))
    image = Image.new("RGB", (150, 70), (10, 120, 30))
    want = proc(text=["x [IMG] y"], images=[image], return_tensors="pt")
    for folder in (tmp_path / "t5", hub):
        again = pixtral_without_torchvision(folder)
        got = again(text=["x [IMG] y"], images=[image], return_tensors="pt")
        assert got["input_ids"].tolist() == want["input_ids"].tolist()
        assert (got["pixel_values"] == want["pixel_values"]).all()


def test_stand_in_takes_the_real_long_edge():
    from mmtune.models.configs import embedded
    from mmtune.models.families import get_family
    from mmtune.resolve.processor import stand_in_processor

    spec = embedded("mistralai/Mistral-Small-3.1-24B-Instruct-2503")
    proc = stand_in_processor(get_family("mistral3"), dict(spec["processor"]))
    assert proc.image_processor.size.longest_edge == 1540 and (proc.patch_size, proc.spatial_merge_size) == (14, 2)
    # 3000 x 2000 -> 1540 x 1026 -> 55 x 37 merged patches (ceil to the 28 px grid): 37 rows of 55 [IMG] + 1
    assert proc._get_num_multimodal_tokens(image_sizes=[[2000, 3000]]).num_image_tokens == [56 * 37]


def test_missing_pil_helper_is_a_clear_error(monkeypatch):
    from transformers.models.pixtral import image_processing_pil_pixtral as pil

    from mmtune.compat.pixtral import _import_class

    if not torchvision_missing():
        pytest.skip("with torchvision the library's class imports as it is")
    monkeypatch.delattr(pil, "get_resize_output_image_size")
    with pytest.raises(CompatError) as e:
        _import_class()
    assert "transformers" in str(e.value) and "Pixtral" in str(e.value) and e.value.fix
