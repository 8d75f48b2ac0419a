"""Broken setups from the fourth batch of public bug reports (docs/doctor.md, "Public bug reports, checked"):
the two the doctor and the loader missed, each rebuilt on a tiny twin, the broken setup caught (or made
impossible) and its clean twin left alone.
"""

from __future__ import annotations

import json

import pytest
from doctor_helpers import context_for, run_codes


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _probe():
    from mmtune.data.records import Record

    return Record("r", "t.jsonl:1", [{"role": "user", "content": [{"type": "text", "text": "What is 2+1?"}]},
                                     {"role": "assistant", "content": [{"type": "text", "text": "3"}]}])


# ----------------------------------------------------------------------------- thinking templates (MM072)
# https://github.com/huggingface/trl/issues/5213 (Qwen3.5: "Mismatch between tokenized prompt and the start of
# tokenized prompt+completion"), https://github.com/huggingface/trl/pull/3522 (DeepSeek-R1: the generation prompt
# adds `<think>` tokens the full conversation does not have).

HEADER = "<|im_start|>{{ message['role'] }}\n"


def qwen3_hybrid(p):
    """Qwen3's template: the last answer rendered after an empty think block its generation prompt lacks."""
    p.chat_template = p.chat_template.replace(
        HEADER, HEADER + "{% if message['role'] == 'assistant' %}<think>\n\n</think>\n\n{% endif %}")


def r1_style(p):
    """DeepSeek-R1's template: the generation prompt opens a think block no rendered answer follows."""
    p.chat_template = p.chat_template.replace("<|im_start|>assistant\n{% endif %}",
                                              "<|im_start|>assistant\n<think>\n{% endif %}")


@pytest.fixture
def text_tree(tmp_path):
    train = _jsonl(tmp_path / "t.jsonl", [{"messages": [{"role": "user", "content": "What is 2+1?"},
                                                        {"role": "assistant", "content": "3"}]}])
    return {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": train, "format": "messages"}}


def test_thinking_block_before_answers_that_the_generation_prompt_lacks(tmp_path, text_tree):
    ctx = context_for(tmp_path, text_tree, qwen3_hybrid)
    enc = ctx.need("encoder")
    # the premise: training puts the block before the answer (as prompt, not trained), evaluation's prompt has none
    e = enc.encode(_probe())
    ids, labels = e["input_ids"].reshape(-1), e["labels"].reshape(-1)
    assert "assistant\n<think>\n\n</think>\n\n3" in enc.tokenizer.decode(ids)
    assert enc.tokenizer.decode(ids[labels != -100]) == "3<|im_end|>"
    assert enc.tokenizer.decode(enc.encode_prompt(_probe())["input_ids"].reshape(-1)).endswith("assistant\n")
    rep = run_codes(ctx, "MM072", "MM069")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM072", "warning")], rep.findings
    assert "'<think>\\n\\n</think>\\n\\n'" in rep.findings[0].message


def test_generation_prompt_that_opens_a_thinking_block(tmp_path, text_tree):
    ctx = context_for(tmp_path, text_tree, r1_style)
    enc = ctx.need("encoder")
    assert enc.tokenizer.decode(enc.encode_prompt(_probe())["input_ids"].reshape(-1)).endswith("assistant\n<think>\n")
    assert "assistant\n3" in enc.tokenizer.decode(enc.encode(_probe())["input_ids"].reshape(-1))
    rep = run_codes(ctx, "MM072", "MM069")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM072", "warning")], rep.findings
    assert "adds '<think>\\n'" in rep.findings[0].message


@pytest.mark.parametrize("name", ["tiny/qwen2-vl", "tiny/llava", "tiny/gemma3", "tiny/mllama", "tiny/phi4-multimodal"])
def test_own_templates_are_silent_on_mm072(tmp_path, text_tree, name):
    tree = dict(text_tree, model={"name": name})
    assert run_codes(context_for(tmp_path, tree), "MM072").findings == []


def test_no_generation_prompt_at_all_stays_mm069s(tmp_path, text_tree):
    import re

    def no_generation_prompt(p):
        p.chat_template = re.sub(r"\{%-? if add_generation_prompt -?%\}.*?\{%-? endif -?%\}", "", p.chat_template,
                                 flags=re.S)

    rep = run_codes(context_for(tmp_path, text_tree, no_generation_prompt), "MM072", "MM069")
    assert [f.code for f in rep.findings] == ["MM069"]


# ----------------------------------------------------------------------------- EXIF orientation (made impossible)
# https://github.com/mistralai/mistral-common/issues/330, https://github.com/sgl-project/sglang/issues/33464,
# https://github.com/ollama/ollama/issues/18418: phone photos store the sensor's pixels and the turn in the EXIF
# Orientation tag; a loader that ignores it feeds the model sideways images, while viewers, transformers'
# load_image and vLLM show them upright. mmtune's loader applied no turn: trained sideways, served upright.

def _photo(path, orientation: int | None):
    """A 64x32 (landscape as stored) JPEG, red band on its left edge; tagged `orientation` when given."""
    import numpy as np
    from PIL import Image

    arr = np.zeros((32, 64, 3), np.uint8)
    arr[:, :8] = (255, 0, 0)
    img = Image.fromarray(arr)
    if orientation is None:
        img.save(path, quality=95)
    else:
        exif = img.getexif()
        exif[0x0112] = orientation
        img.save(path, exif=exif, quality=95)
    return path


def test_exif_rotated_photo_is_trained_upright_as_viewers_and_transformers_show_it(tmp_path):
    from PIL import Image, ImageOps
    from transformers.image_utils import load_image as hf_load_image

    from mmtune.data.media import load_image
    from mmtune.data.media_probe import image_size

    path = _photo(tmp_path / "phone.jpg", 6)  # "rotate 90 CW to display": portrait 32x64 on screen
    shown = ImageOps.exif_transpose(Image.open(path))
    assert shown.size == (32, 64) == hf_load_image(str(path)).size  # the premise: what a server feeds the model
    part = {"type": "image", "path": str(path)}
    assert load_image(part).size == shown.size
    assert image_size(part) == (64, 32)  # (height, width) from the header: the doctor's counts agree with training
    # untagged and orientation-1 images are left as stored
    for o in (None, 1):
        assert load_image({"type": "image", "path": str(_photo(tmp_path / f"p{o}.jpg", o))}).size == (64, 32)


def test_exif_rotated_photo_encodes_like_the_upright_image(tmp_path):
    """The record's pixels and patch grid (tiny Qwen2-VL) are those of the same photo saved upright."""
    from PIL import Image, ImageOps

    tagged = _photo(tmp_path / "phone.jpg", 6)
    ImageOps.exif_transpose(Image.open(tagged)).save(tmp_path / "upright.png")
    rows = [{"messages": [{"role": "user", "content": "<image>Where is the red band?"},
                          {"role": "assistant", "content": "top"}], "images": [name]}
            for name in ("phone.jpg", "upright.png")]
    tree = {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": _jsonl(tmp_path / "t.jsonl", rows)}}
    ctx = context_for(tmp_path, tree)
    from mmtune.data.sources import load_records

    resolved = ctx.need("resolved")
    records = load_records(resolved.cfg.data.train, resolved.cfg.data).records
    a, b = (ctx.need("encoder").encode(r) for r in records)
    assert a["image_grid_thw"].tolist() == b["image_grid_thw"].tolist()
    assert (a["pixel_values"] - b["pixel_values"]).abs().max() < 0.2  # JPEG vs PNG of the same pixels
