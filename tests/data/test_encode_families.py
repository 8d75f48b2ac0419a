"""The Encoder is generic: on every tiny twin (real processor classes) the label mask decodes to exactly
the answer + end-of-turn token, and token_counts equals the placeholder ids in input_ids."""

from __future__ import annotations

import pytest

from mmtune.compat.transformers_internals import supports_video_audio_tracks
from mmtune.config.schema import RunConfig
from mmtune.data.encode import Encoder
from mmtune.data.records import Record
from mmtune.errors import DataError

from .conftest import write_mp4, write_png, write_wav

TINY_NAMES = ["tiny/qwen2-vl", "tiny/qwen2.5-vl", "tiny/qwen3-vl", "tiny/qwen2-audio", "tiny/qwen2.5-omni",
              "tiny/llava", "tiny/llava-next"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fam")
    write_png(d / "a.png", size=(100, 80))
    write_wav(d / "a.wav", seconds=1.0, sr=44100)
    (d / "frames").mkdir()
    for i in range(4):
        write_png(d / "frames" / f"{i}.png", (50 * i, 0, 0), size=(64, 64))
    write_mp4(d / "av.mp4", n_frames=8, fps=4, size=(64, 64), audio_seconds=2.0)
    return d


def _encoder(name):
    from mmtune.models.tiny import tiny_config_and_processor

    proc = tiny_config_and_processor(name)[1]
    return Encoder(proc, None, RunConfig.model_validate({"model": {"name": name, "video_frames": 4}}))


@pytest.mark.parametrize("name", TINY_NAMES)
def test_every_modality_of_every_family(name, files):
    enc = _encoder(name)
    parts = {"image": {"type": "image", "path": str(files / "a.png")},
             "video": {"type": "video", "path": str(files / "frames")},
             "audio": {"type": "audio", "path": str(files / "a.wav")}}
    tried = 0
    for kind in ("image", "video", "audio"):
        if kind not in enc.modalities:
            continue
        tried += 1
        r = Record("x", "f:1", [{"role": "user", "content": [parts[kind], {"type": "text", "text": "What is it?"}]},
                                {"role": "assistant", "content": "red"}])
        out = enc.encode(r)
        lab = out["labels"]
        assert enc.tokenizer.decode(lab[lab != -100]) == "red<|im_end|>", (name, kind)
        counts = enc.token_counts(r)
        assert counts[kind] == int((out["input_ids"] == enc.media_token_id[kind]).sum()) > 0
        assert counts["total"] == out["input_ids"].numel()
    assert tried > 0


@pytest.mark.skipif(not supports_video_audio_tracks(), reason="this transformers cannot interleave a video's "
                    "audio track (5.17); tests/test_compat.py checks the clear error")
def test_omni_video_with_its_audio_track(files):
    enc = _encoder("tiny/qwen2.5-omni")
    r = Record("x", "f:1", [{"role": "user", "content": [
        {"type": "video", "path": str(files / "av.mp4"), "use_audio": True}, {"type": "text", "text": "What?"}]},
        {"role": "assistant", "content": "red"}])
    out = enc.encode(r)
    lab = out["labels"]
    assert enc.tokenizer.decode(lab[lab != -100]) == "red<|im_end|>"
    counts = enc.token_counts(r)
    assert counts["video"] > 0 and counts["audio"] > 0  # interleaved in one run
    assert "input_features" in out and "pixel_values_videos" in out


def test_use_audio_on_a_non_omni_model_is_reported(files):
    enc = _encoder("tiny/qwen2-vl")
    r = Record("x", "f:1", [{"role": "user", "content": [
        {"type": "video", "path": str(files / "av.mp4"), "use_audio": True}, {"type": "text", "text": "What?"}]},
        {"role": "assistant", "content": "red"}])
    with pytest.raises(DataError) as e:
        enc.encode(r)
    assert e.value.reason == "unsupported modality" and "omni" in e.value.fix


@pytest.mark.parametrize("name", ["tiny/smolvlm", "tiny/internvl", "tiny/glm4v", "tiny/llava-onevision"])
def test_a_modality_the_family_does_not_wire_is_a_counted_bad_record(name, files):
    """These processors take videos, but mmtune feeds these families images only (their Family's modalities):
    a video record is the record's problem ("unsupported modality", counted), not a crash in the model."""
    from mmtune.models.families import get_family
    from mmtune.models.tiny import tiny_config_and_processor, tiny_spec

    family = get_family(tiny_spec(name).family)
    proc = tiny_config_and_processor(name)[1]
    assert getattr(proc, "video_processor", None) is not None  # the processor alone would say yes
    enc = Encoder(proc, family, RunConfig.model_validate({"model": {"name": name, "video_frames": 4}}))
    assert enc.modalities == set(family.modalities) == {"text", "image"}
    r = Record("v", "f:3", [{"role": "user", "content": [{"type": "video", "path": str(files / "frames")},
                                                         {"type": "text", "text": "What is it?"}]},
                            {"role": "assistant", "content": "red"}])
    with pytest.raises(DataError) as e:
        enc.encode(r)
    assert e.value.reason == "unsupported modality" and "video" in e.value.what
