"""One record-length engine: `Encoder.measure` (no pixels decoded) equals what `Encoder.encode` produces,
for the tiny twin of every family, on every modality it takes, including the shapes that crashed the
doctor's old arithmetic (very wide images, large images, long audio, silent video)."""

from __future__ import annotations

import pytest

from mmtune.config.schema import RunConfig
from mmtune.data.encode import Encoder
from mmtune.data.formats import BadRecord
from mmtune.data.records import Record
from mmtune.resolve import local_target, resolve_run
from tests.family_registry import MEDIA

from .conftest import write_mp4, write_png, write_wav

FAMILIES = MEDIA  # every registered family's tiny twin -> the media its records carry (tests/family_registry.py)


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("lengths")
    images = {"small": write_png(d / "small.png", size=(30, 20)),
              "wide": write_png(d / "wide.png", size=(3000, 10)),  # 300:1
              "large": write_png(d / "large.png", size=(1280, 960)),
              "odd": write_png(d / "odd.png", size=(333, 201))}
    audio = {"short": write_wav(d / "short.wav", seconds=0.7, sr=16000),
             "long": write_wav(d / "long.wav", seconds=12.3, sr=44100)}
    (d / "frames").mkdir()
    for i in range(5):
        write_png(d / "frames" / f"{i:02d}.png", (40 * i, 0, 0), size=(90, 60))
    videos = {"frames": d / "frames", "silent": write_mp4(d / "silent.mp4", n_frames=9, fps=4, size=(64, 48))}
    return images, audio, videos


def _resolved(name, **model):
    cfg = RunConfig.model_validate({"model": {"name": name, "video_frames": 4, **model},
                                    "data": {"max_length": 100000}})
    return resolve_run(cfg, local_target("cpu"))


def _record(parts, rid="r"):
    return Record(rid, f"test:{rid}", [{"role": "user", "content": parts + [{"type": "text", "text": "How many?"}]},
                                        {"role": "assistant", "content": [{"type": "text", "text": "Three."}]}])


def _records(modalities, media):
    images, audio, videos = media
    out = [_record([], "text")]
    if "image" in modalities:
        out += [_record([{"type": "image", "path": str(p)}], f"image-{k}") for k, p in images.items()]
        out.append(_record([{"type": "image", "path": str(images["small"])},
                            {"type": "image", "path": str(images["odd"])}], "two-images"))
    if "video" in modalities:
        out += [_record([{"type": "video", "path": str(p)}], f"video-{k}") for k, p in videos.items()]
    if "audio" in modalities:
        out += [_record([{"type": "audio", "path": str(p)}], f"audio-{k}") for k, p in audio.items()]
    return out


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_measure_equals_encode(name, media):
    enc = Encoder.for_run(_resolved(name))
    for r in _records(FAMILIES[name], media):
        assert _outcome(enc.measure, r) == _outcome(enc.token_counts, r), (name, r.id)


def _outcome(fn, r):
    """The counts, or the reason the record is refused (a 300:1 image is refused by Qwen's processor)."""
    try:
        return fn(r)
    except BadRecord as e:
        return e.reason


def test_measure_follows_the_pixel_cap(media):
    images, _, _ = media
    r = _record([{"type": "image", "path": str(images["large"])}])
    small = Encoder.for_run(_resolved("tiny/qwen2-vl", max_pixels=56 * 56, min_pixels=28 * 28))
    big = Encoder.for_run(_resolved("tiny/qwen2-vl", max_pixels=448 * 448))
    assert small.measure(r)["image"] == small.token_counts(r)["image"] == 2  # 1280x960 -> 28x56 px -> 1x2 merged
    assert big.measure(r) == big.token_counts(r)
    assert big.measure(r)["image"] > 2


def _refusal(enc, record) -> tuple[str, str]:
    """The reason measure and encode each refuse the record with."""
    with pytest.raises(BadRecord) as a:
        enc.measure(record)
    with pytest.raises(BadRecord) as b:
        enc.encode(record)
    return a.value.reason, b.value.reason


def test_measure_raises_what_encode_raises(media, tmp_path):
    _, audio, videos = media
    enc = Encoder.for_run(_resolved("tiny/qwen2-audio", audio_max_seconds=5))
    assert _refusal(enc, _record([{"type": "audio", "path": str(audio["long"])}])) == ("too long", "too long")
    short = Encoder.for_run(_resolved("tiny/qwen2-vl", video_frames=12))
    assert _refusal(short, _record([{"type": "video", "path": str(videos["frames"])}])) == \
        ("video too short", "video too short")
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    r = _record([{"type": "image", "path": str(bad)}])
    with pytest.raises(BadRecord) as a:
        Encoder.for_run(_resolved("tiny/qwen2-vl")).measure(r)
    assert a.value.reason == "corrupt media"


@pytest.mark.parametrize("name", ["tiny/qwen2-vl", "tiny/qwen2.5-omni"])
def test_measure_without_the_processors_own_arithmetic(name, media, monkeypatch):
    """transformers 5.17: Qwen2-VL's `_get_num_multimodal_tokens` raises a NameError on video sizes, and
    Qwen2.5-Omni's processor has none. measure still equals encode (Qwen arithmetic asked of the image /
    video processors, or the record encoded in full)."""
    enc = Encoder.for_run(_resolved(name))

    def broken(*args, **kwargs):
        raise NameError("cannot access free variable 'merge_size'")

    monkeypatch.setattr(enc.processor, "_get_num_multimodal_tokens", broken)
    for r in _records(FAMILIES[name], media):
        assert _outcome(enc.measure, r) == _outcome(enc.token_counts, r), (name, r.id)
