"""Encoder: the label mask decodes to exactly the answers (+ end-of-turn), placeholder and length checks,
token counts, media errors naming the record and file."""

from __future__ import annotations

import pytest

from mmtune.config.schema import RunConfig
from mmtune.data.encode import Encoder
from mmtune.data.records import Record
from mmtune.errors import DataError

from .conftest import write_png


def cfg(model="tiny/qwen2-vl", video_frames=8, **data):
    return RunConfig.model_validate({"model": {"name": model, "video_frames": video_frames}, "data": data})


@pytest.fixture(scope="module")
def vl():
    from mmtune.models.tiny import tiny_config_and_processor

    return tiny_config_and_processor("tiny/qwen2-vl")[1]


@pytest.fixture(scope="module")
def text_tok():
    from mmtune.models.tiny import tiny_config_and_processor

    return tiny_config_and_processor("tiny/qwen2")[1]


def rec(messages, rid="r1"):
    return Record(id=rid, source="file.jsonl:7", messages=messages)


def unmasked(out, tok) -> str:
    lab = out["labels"]
    return tok.decode(lab[lab != -100])


def test_text_only_multi_turn_labels_decode_exactly(text_tok):
    enc = Encoder(text_tok, None, cfg("tiny/qwen2"))
    r = rec([{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "hi there"},
             {"role": "user", "content": "again"}, {"role": "assistant", "content": [{"type": "text", "text": "yes"}]}])
    out = enc.encode(r)
    assert unmasked(out, text_tok) == "hi there<|im_end|>yes<|im_end|>"
    assert out["input_ids"].shape == out["labels"].shape == out["attention_mask"].shape
    # Labels equal the ids where unmasked, and the tail newline after <|im_end|> is masked.
    keep = out["labels"] != -100
    assert (out["labels"][keep] == out["input_ids"][keep]).all() and out["labels"][-1] == -100
    prompt = enc.encode_prompt(r)
    assert text_tok.decode(prompt["input_ids"]).endswith("again<|im_end|>\n<|im_start|>assistant\n")
    assert "labels" not in prompt and enc.answer_text(r) == "yes"


def test_system_prompt_is_added_and_masked(text_tok):
    enc = Encoder(text_tok, None, cfg("tiny/qwen2", system_prompt="Answer with a number."))
    out = enc.encode(rec([{"role": "user", "content": "How many?"}, {"role": "assistant", "content": "3"}]))
    assert text_tok.decode(out["input_ids"]).startswith("<|im_start|>system\nAnswer with a number.<|im_end|>")
    assert unmasked(out, text_tok) == "3<|im_end|>"


def test_vl_image_labels_and_token_counts(vl, tmp_path):
    write_png(tmp_path / "a.png", size=(200, 120))
    enc = Encoder(vl, None, cfg())
    r = rec([{"role": "user", "content": [{"type": "image", "path": str(tmp_path / "a.png")},
                                          {"type": "text", "text": "How many circles are there?"}]},
             {"role": "assistant", "content": "12"}])
    out = enc.encode(r)
    assert unmasked(out, vl.tokenizer) == "12<|im_end|>"
    assert out["pixel_values"].shape[0] == int(out["image_grid_thw"].prod(-1).sum())
    counts = enc.token_counts(r)
    n_img = int((out["input_ids"] == vl.image_token_id).sum())
    assert counts["image"] == n_img > 0
    assert counts["total"] == out["input_ids"].numel() == counts["text"] + n_img
    # The count follows max_pixels: a smaller cap means fewer image tokens.
    small = Encoder(vl.__class__(image_processor=vl.image_processor.__class__(min_pixels=28 * 28, max_pixels=56 * 56),
                                 tokenizer=vl.tokenizer, video_processor=vl.video_processor,
                                 chat_template=vl.chat_template), None, cfg())
    assert small.token_counts(r)["image"] < counts["image"]


def test_max_pixels_config_is_applied(tmp_path):
    from mmtune.models.tiny import tiny_config_and_processor

    proc = tiny_config_and_processor("tiny/qwen2-vl")[1]
    write_png(tmp_path / "a.png", size=(112, 112))
    r = rec([{"role": "user", "content": [{"type": "image", "path": str(tmp_path / "a.png")}, {"type": "text", "text": "q"}]},
             {"role": "assistant", "content": "1"}])
    from mmtune.resolve import local_target, resolve_run

    c = RunConfig.model_validate({"model": {"name": "tiny/qwen2-vl", "max_pixels": 56 * 56, "min_pixels": 28 * 28}})
    resolved = resolve_run(c, local_target("cpu"))
    assert resolved.media.max_pixels == 3136 and resolved.decision("model.max_pixels").reason == "model.max_pixels"
    enc = Encoder.for_run(resolved)
    assert enc.token_counts(r)["image"] == 4  # 56x56 -> 2x2 merged tokens
    del proc


def test_multi_image_multi_turn_labels(vl, tmp_path):
    write_png(tmp_path / "a.png")
    write_png(tmp_path / "b.png", (0, 200, 0))
    enc = Encoder(vl, None, cfg())
    r = rec([{"role": "user", "content": [{"type": "image", "path": str(tmp_path / "a.png")}, {"type": "text", "text": "first"}]},
             {"role": "assistant", "content": "red"},
             {"role": "user", "content": [{"type": "image", "path": str(tmp_path / "b.png")},
                                          {"type": "image", "path": str(tmp_path / "b.png")}, {"type": "text", "text": "and?"}]},
             {"role": "assistant", "content": "green"}])
    out = enc.encode(r)
    assert unmasked(out, vl.tokenizer) == "red<|im_end|>green<|im_end|>"
    assert out["image_grid_thw"].shape[0] == 3


def test_video_frames_labels(vl, tmp_path):
    frames = tmp_path / "clip"
    frames.mkdir()
    for i in range(6):
        write_png(frames / f"{i:03d}.png", (40 * i, 0, 0), size=(56, 56))
    r = rec([{"role": "user", "content": [{"type": "video", "path": str(frames)}, {"type": "text", "text": "What?"}]},
             {"role": "assistant", "content": "red"}])
    with pytest.raises(DataError) as e:  # 6 frames, 8 asked: a clear error with the way out
        Encoder(vl, None, cfg()).encode(r)
    assert "6 frame(s)" in str(e.value) and "model.video_frames=6" in e.value.fix and str(frames) in str(e.value)
    enc = Encoder(vl, None, cfg(video_frames=6))
    out = enc.encode(r)
    assert unmasked(out, vl.tokenizer) == "red<|im_end|>"
    t, h, w = out["video_grid_thw"][0].tolist()
    assert t == 3  # 6 frames, temporal patch 2
    assert enc.token_counts(r)["video"] == t * h * w // 4


def test_placeholder_in_text_is_a_mismatch(vl, tmp_path):
    write_png(tmp_path / "a.png")
    enc = Encoder(vl, None, cfg())
    r = rec([{"role": "user", "content": [{"type": "image", "path": str(tmp_path / "a.png")},
                                          {"type": "text", "text": "<|image_pad|> how many?"}]},
             {"role": "assistant", "content": "2"}], rid="rec-42")
    with pytest.raises(DataError) as e:
        enc.encode(r)
    assert "rec-42" in str(e.value) and "file.jsonl:7" in str(e.value)
    assert "1 image part(s) but 2" in str(e.value) and "remove literal" in e.value.fix
    assert e.value.reason == "placeholder mismatch"


def test_overlong_record_with_media_is_an_error_not_truncated(vl, tmp_path):
    write_png(tmp_path / "a.png", size=(112, 112))
    enc = Encoder(vl, None, cfg(max_length=20))
    r = rec([{"role": "user", "content": [{"type": "image", "path": str(tmp_path / "a.png")}, {"type": "text", "text": "q"}]},
             {"role": "assistant", "content": "1"}], rid="long-1")
    with pytest.raises(DataError) as e:
        enc.encode(r)
    msg = str(e.value)
    assert "long-1" in msg and "data.max_length=20" in msg and "1 image" in msg
    assert "raise data.max_length to at least" in e.value.fix and e.value.reason == "too long"
    assert enc.token_counts(r)["total"] > 20  # counting never enforces the cap


def test_missing_and_undecodable_image_name_record_and_file(vl, tmp_path):
    enc = Encoder(vl, None, cfg())
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")
    for name, words in (("gone.png", "not found"), ("broken.png", "cannot be decoded")):
        r = rec([{"role": "user", "content": [{"type": "image", "path": str(tmp_path / name)}, {"type": "text", "text": "q"}]},
                 {"role": "assistant", "content": "1"}], rid="img-rec")
        with pytest.raises(DataError) as e:
            enc.encode(r)
        assert words in str(e.value) and name in str(e.value) and "img-rec" in str(e.value)
        assert e.value.reason == ("missing media" if name == "gone.png" else "corrupt media")
        assert e.value.fix


def test_record_without_answer(vl):
    enc = Encoder(vl, None, cfg())
    with pytest.raises(DataError) as e:
        enc.encode(rec([{"role": "user", "content": "q"}], rid="noans"))
    assert "noans" in str(e.value) and "assistant" in e.value.fix


def test_media_for_text_only_model_is_reported(text_tok, tmp_path):
    write_png(tmp_path / "a.png")
    enc = Encoder(text_tok, None, cfg("tiny/qwen2"))
    r = rec([{"role": "user", "content": [{"type": "image", "path": str(tmp_path / "a.png")}, {"type": "text", "text": "q"}]},
             {"role": "assistant", "content": "1"}])
    with pytest.raises(DataError) as e:
        enc.encode(r)
    assert e.value.reason == "unsupported modality" and "image" in str(e.value)


def test_the_encoder_applies_the_resolved_media_caps_not_the_raw_config(tmp_path):
    """Encoder.for_run takes resolved.media; the frames it samples and counts follow those caps even where
    the config says otherwise (here a copy of the resolved caps with half the frames)."""
    import dataclasses

    from mmtune.resolve import local_target, resolve_run

    from .conftest import write_mp4

    write_mp4(tmp_path / "v.mp4", n_frames=20, size=(56, 56))
    r = rec([{"role": "user", "content": [{"type": "video", "path": str(tmp_path / "v.mp4")}, {"type": "text", "text": "q"}]},
             {"role": "assistant", "content": "1"}])
    resolved = resolve_run(cfg(video_frames=8), local_target("cpu"))
    enc = Encoder.for_run(resolved)
    assert enc.media is resolved.media and enc.media.video_frames == 8
    fewer = Encoder(enc.processor, resolved.family, resolved.cfg, media=dataclasses.replace(resolved.media, video_frames=4))
    eight, four = enc.token_counts(r)["video"], fewer.token_counts(r)["video"]
    assert four * 2 == eight and enc.encode(r)["input_ids"].numel() > fewer.encode(r)["input_ids"].numel()
