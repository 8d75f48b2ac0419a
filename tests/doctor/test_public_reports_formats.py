"""Public bug reports, batch 7 (docs/doctor.md): data written for another tool (ms-swift, axolotl, TRL,
qwen_vl_utils, Qwen-VL) that mmtune read as something else -- a turn trained that the data said not to train,
a prompt-completion file refused with a fix that cannot work, a base64 image taken for a path, a per-image size
dropped, an image tag trained as text. Each test rebuilds the report's record, checks what is trained (the
labels the encoder gives the tiny Qwen2-VL) or that it is refused with its reason, and keeps the clean twin.
"""

from __future__ import annotations

import base64
import json

import pytest
from doctor_helpers import TINY_VL, context_for
from PIL import Image

from mmtune.config.schema import DataConfig
from mmtune.data.sources import load_records
from mmtune.errors import DataError


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from mmtune.data.encode import Encoder

    return Encoder.for_run(context_for(tmp_path_factory.mktemp("enc"), TINY_VL).need("resolved"))


def _file(tmp_path, rows, name="d.jsonl"):
    Image.new("RGB", (56, 56), "red").save(tmp_path / "a.png")
    f = tmp_path / name
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def _load(f, **kw):
    return load_records(str(f), DataConfig(on_bad_record="skip", **kw))


def _trained(encoder, record) -> str:
    """The text of the tokens the loss is taken on."""
    out = encoder.encode(record)
    ids = out["input_ids"].reshape(-1)[out["labels"].reshape(-1) != -100]
    return encoder.tokenizer.decode(ids)


def _turns(q1="Q1", a1="first answer", q2="Q2", a2="second answer", **marks):
    return [{"role": "user", "content": q1}, {"role": "assistant", "content": a1, **marks},
            {"role": "user", "content": q2}, {"role": "assistant", "content": a2}]


# ----------------------------------------------------------------------------- a turn's own loss switch
# https://github.com/modelscope/ms-swift/issues/5215, https://github.com/modelscope/ms-swift/pull/5547,
# https://github.com/modelscope/ms-swift/issues/9029 (ms-swift's "loss": false on an assistant message);
# https://github.com/axolotl-ai-cloud/axolotl/pull/1702 (axolotl's / mistral-finetune's "weight": 0). mmtune
# ignored the key and trained the answer the data marked as not to be learned.

@pytest.mark.parametrize("mark", [{"loss": False}, {"weight": 0}, {"training": False}])
def test_a_turn_marked_not_to_train_is_rendered_but_not_trained(tmp_path, encoder, mark):
    rs = _load(_file(tmp_path, [{"messages": _turns(**mark)}, {"messages": _turns()}]))
    assert rs.skipped == {}, rs.problems
    marked, clean = rs[0], rs[1]
    assert "first answer" in encoder.rendered(marked)  # kept as context
    trained = _trained(encoder, marked)
    assert "first answer" not in trained and "second answer" in trained
    both = _trained(encoder, clean)  # the clean twin: every answer trained
    assert "first answer" in both and "second answer" in both


def test_a_loss_switch_that_trains_a_user_turn_or_is_not_a_switch_is_refused(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "Q", "loss": True}, {"role": "assistant", "content": "A"}]},
            {"messages": _turns(weight=0.5)},
            {"messages": _turns(loss="no")},
            {"messages": _turns(loss=True)}]  # true on an assistant turn: what mmtune does anyway
    rs = _load(_file(tmp_path, rows))
    assert rs.skipped == {"bad conversation": 1, "bad type": 2}, rs.problems
    assert any("trains assistant turns only" in what for _, what in rs.problems)
    assert len(rs) == 1


def test_every_answer_marked_not_to_train_is_no_answer(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "loss": False}]}]
    with pytest.raises(DataError) as e:
        load_records(str(_file(tmp_path, rows)), DataConfig())
    assert "marked not to be trained" in e.value.what and f"{tmp_path / 'd.jsonl'}:1" in str(e.value)


# ----------------------------------------------------------------------------- TRL's prompt-completion layout
# https://github.com/huggingface/trl/issues/4147, https://github.com/huggingface/trl/issues/3468,
# https://github.com/huggingface/trl/issues/5324: SFT data as `prompt` / `completion` (conversational or text),
# trained on the completion only. mmtune refused every row as "missing field" with the fix
# data.columns.messages=<field>, which cannot read two columns as one conversation.

def test_trl_prompt_completion_trains_the_completion_only(tmp_path, encoder):
    rows = [{"prompt": [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Colour?"}]},
                        {"role": "assistant", "content": "earlier answer"}, {"role": "user", "content": "Sure?"}],
             "completion": [{"role": "assistant", "content": "yes it is"}], "images": ["a.png"]},
            {"prompt": "What is 2+2?", "completion": "four"}]
    rs = _load(_file(tmp_path, rows))
    assert rs.skipped == {}, rs.problems
    conv, plain = rs[0], rs[1]
    assert [m["role"] for m in conv.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert [p["path"] for p in conv.media_parts()] == [str(tmp_path / "a.png")]
    trained = _trained(encoder, conv)
    assert "yes it is" in trained and "earlier answer" not in trained and "Sure?" not in trained
    assert "earlier answer" in encoder.rendered(conv)
    assert [m["role"] for m in plain.messages] == ["user", "assistant"]
    assert "four" in _trained(encoder, plain) and "2+2" not in _trained(encoder, plain)


# ----------------------------------------------------------------------------- base64 images in the images list
# https://github.com/modelscope/ms-swift/issues/5273, https://github.com/modelscope/ms-swift/pull/5425,
# https://github.com/hiyouga/LlamaFactory/issues/7752: images given inline as base64 data URLs in the `images`
# list. mmtune read them in an image_url part but took them for a file path in the list: "media file not found:
# <folder>/data:image/png;base64,..." with the fix to check the path.

def test_data_url_in_the_images_list_is_the_image(tmp_path, encoder):
    f = _file(tmp_path, [])
    data = base64.b64encode((tmp_path / "a.png").read_bytes()).decode()
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "<image>Colour?"},
                                          {"role": "assistant", "content": "red"}],
                             "images": ["data:image/png;base64," + data]}) + "\n"
                 + json.dumps({"messages": [{"role": "user", "content": "<image>Colour?"},
                                            {"role": "assistant", "content": "red"}], "images": ["a.png"]}) + "\n")
    rs = _load(f)
    assert rs.skipped == {}, rs.problems
    inline, by_path = (encoder.encode(r) for r in rs)
    assert inline["pixel_values"].equal(by_path["pixel_values"])


# https://github.com/QwenLM/Qwen2.5-VL (README, "Using 🤗 Transformers to Chat": `{"type": "image", "image":
# "file:///path/to/your/image.jpg"}` and `"data:image;base64,/9j/..."`, as qwen_vl_utils reads them): Qwen's own
# message layout puts the URL in the part's `image` value. mmtune read that value as a relative path: "media file
# not found: <folder>/file:///..." and "<folder>/data:image;base64,...". A broken data URL is named as one.

def test_qwen_vl_utils_urls_in_a_parts_image_value_are_the_image(tmp_path, encoder):
    f = _file(tmp_path, [])
    data = base64.b64encode((tmp_path / "a.png").read_bytes()).decode()
    values = ["a.png", f"file://{tmp_path / 'a.png'}", "data:image;base64," + data, "data:image;base64,!!not-base64"]
    f.write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": [{"type": "image", "image": v}, {"type": "text", "text": "Colour?"}]},
        {"role": "assistant", "content": "red"}]}) + "\n" for v in values))
    rs = _load(f)
    assert len(rs) == 3 and rs.skipped == {"bad media": 1}, rs.problems
    assert rs.problems[0][1] == "the image data: URL holds invalid base64"
    by_path, by_file_url, inline = (encoder.encode(r) for r in rs)
    assert by_file_url["pixel_values"].equal(by_path["pixel_values"])
    assert inline["pixel_values"].equal(by_path["pixel_values"])


# ----------------------------------------------------------------------------- qwen_vl_utils' per-image sizes
# https://github.com/Yuliang-Liu/MonkeyOCR/issues/354, https://github.com/2U1/Qwen-VL-Series-Finetune/issues/9:
# Qwen's own message layout with per-item `resized_height` / `resized_width` (or `max_pixels`, `fps`, `nframes`).
# mmtune dropped them: a 56x56 image asked at 28x28 trained as 4 image tokens, not 1.

def test_per_part_sizes_are_refused_not_dropped(tmp_path):
    part = {"type": "image", "image": "a.png"}
    rows = [{"messages": [{"role": "user", "content": [{**part, "resized_height": 28, "resized_width": 28},
                                                       {"type": "text", "text": "Colour?"}]},
                          {"role": "assistant", "content": "red"}]},
            {"messages": [{"role": "user", "content": [part, {"type": "text", "text": "Colour?"}]},
                          {"role": "assistant", "content": "red"}]}]
    rs = _load(_file(tmp_path, rows))
    assert rs.skipped == {"bad media": 1} and len(rs) == 1, rs.problems
    assert "resized_height=28" in rs.problems[0][1] and rs.problems[0][0].endswith("d.jsonl:1")


# ----------------------------------------------------------------------------- Qwen-VL's <img>path</img>
# https://github.com/modelscope/ms-swift/issues/99, https://github.com/QwenLM/Qwen-VL/issues/147,
# https://github.com/zai-org/CogVLM/issues/36: Qwen-VL's fine-tuning format names the image inside the text,
# "Picture 1: <img>assets/demo.jpeg</img>\n...". mmtune trained it as a text-only record, the path as words.

def test_qwen_vl_img_tag_is_refused_and_says_how_to_write_it(tmp_path):
    rows = [{"conversations": [{"from": "user", "value": "Picture 1: <img>a.png</img>\nWhat colour?"},
                               {"from": "assistant", "value": "red"}]},
            {"conversations": [{"from": "user", "value": "<image>\nWhat colour?"},
                               {"from": "assistant", "value": "red"}], "images": ["a.png"]}]
    f = _file(tmp_path, rows)
    rs = _load(f)
    assert rs.skipped == {"placeholder mismatch": 1} and len(rs) == 1, rs.problems
    with pytest.raises(DataError) as e:
        load_records(str(f), DataConfig())
    assert "<img>a.png</img>" in e.value.what and '"images": ["a.png"]' in e.value.fix
