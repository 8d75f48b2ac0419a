"""Broken setups from the thirteenth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 13:
images and video at training time"): what happens between a record's image or video file and the model's inputs.
Each runs the encoder training runs (data/encode.py, the media loader behind `mmtune train`, `mmtune doctor`'s
decode pass, `mmtune eval` and `mmtune chat`) on the tiny Qwen2-VL's processor, and compares with what the
model's own processor makes of the same file.
"""

from __future__ import annotations

import numpy as np
import pytest

from mmtune.config.schema import RunConfig
from mmtune.data.encode import Encoder
from mmtune.data.records import Record


@pytest.fixture(scope="module")
def vl():
    from mmtune.models.tiny import tiny_config_and_processor

    return tiny_config_and_processor("tiny/qwen2-vl")[1]


def _encode(vl, part: dict, **model) -> dict:
    cfg = RunConfig.model_validate({"model": {"name": "tiny/qwen2-vl", **model}})
    rec = Record(id="r1", source="d.jsonl:1", messages=[
        {"role": "user", "content": [part, {"type": "text", "text": "What is it?"}]},
        {"role": "assistant", "content": "a logo"}])
    return Encoder(vl, None, cfg).encode(rec)


# https://github.com/QwenLM/Qwen3-VL/pull/661 (qwen_vl_utils: "a white background for rgba image rather than directly
# convert to rgb"), https://github.com/kohya-ss/sd-scripts/issues/1269, https://github.com/HKUDS/RAG-Anything/pull/317,
# https://github.com/mflux-community/mflux/pull/722: PIL's convert("RGB") drops alpha and keeps the colour stored under
# it, black in most exported PNG logos and screenshots. transformers' convert_to_rgb composites onto white, so the
# model was trained on black backgrounds and served (processor, vLLM, qwen_vl_utils) on white ones.

def _transparent_files(tmp_path):
    from PIL import Image

    rgba = np.zeros((56, 84, 4), np.uint8)
    rgba[:, :28] = (200, 30, 30, 255)  # an opaque red band; the rest transparent, stored black
    rgba[:, 28:42, 3] = 128  # and a half-transparent strip
    Image.fromarray(rgba, "RGBA").save(tmp_path / "logo.png")
    pal = Image.fromarray(rgba[..., :3]).convert("P")  # a palette image whose black is the transparent colour
    pal.info["transparency"] = pal.getpixel((60, 10))
    pal.save(tmp_path / "logo.gif", transparency=pal.info["transparency"])
    return [tmp_path / "logo.png", tmp_path / "logo.gif"]


def test_transparent_images_are_seen_on_white_as_the_processor_sees_them(vl, tmp_path):
    from PIL import Image

    for path in _transparent_files(tmp_path):
        out = _encode(vl, {"type": "image", "path": str(path)})
        with Image.open(path) as raw:  # the processor's own handling of the file (convert_to_rgb onto white)
            own = vl.image_processor(images=[raw], return_tensors="pt")
        assert out["image_grid_thw"].tolist() == own["image_grid_thw"].tolist()
        assert np.allclose(out["pixel_values"].numpy(), own["pixel_values"].numpy(), atol=1e-5), path.name
    from mmtune.data.media import load_image

    seen = np.asarray(load_image({"type": "image", "path": str(tmp_path / "logo.png")}))
    assert (seen[:, 60] == 255).all() and (seen[:, 10] == (200, 30, 30)).all()  # white background, opaque band kept


# https://github.com/huggingface/transformers/issues/25694: a greyscale (H, W) image, "Unsupported number of image
# dimensions: 2". Pinned: every image reaches the processor as RGB (media.to_rgb), so a greyscale PNG encodes as the
# processor encodes its RGB conversion.

def test_greyscale_images_reach_the_processor_as_rgb(vl, tmp_path):
    from PIL import Image

    grey = (np.arange(56 * 56, dtype=np.uint32).reshape(56, 56) % 251).astype(np.uint8)
    Image.fromarray(grey, "L").save(tmp_path / "scan.png")
    out = _encode(vl, {"type": "image", "path": str(tmp_path / "scan.png")})
    own = vl.image_processor(images=[Image.fromarray(grey, "L").convert("RGB")], return_tensors="pt")
    assert np.allclose(out["pixel_values"].numpy(), own["pixel_values"].numpy(), atol=1e-5)


# https://github.com/meta-pytorch/torchcodec/issues/1084 and its fix https://github.com/meta-pytorch/torchcodec/pull/1173
# (transformers' default video decoder turns frames by the display matrix since torchcodec 0.11),
# https://github.com/dmlc/decord/issues/24, https://github.com/opencv/opencv/issues/15499: a phone's portrait clip is
# stored landscape with "rotation of -90 degrees"; decoders that ignore it give sideways frames. mmtune's PyAV decode
# ignored it: the clip was trained sideways (and a frames folder cut from it by the ffmpeg command line, which
# turns frames, was upright).

def _clip(path, frame: np.ndarray, rotation: int | None):
    import av

    with av.open(str(path), "w") as c:
        s = c.add_stream("mpeg4", rate=4)
        s.height, s.width = frame.shape[:2]
        s.pix_fmt = "yuv420p"
        if rotation is not None:
            s.set_display_rotation(rotation)
        for _ in range(8):
            for p in s.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


def test_a_phone_clip_with_a_display_rotation_is_decoded_upright(vl, tmp_path):
    from mmtune.data.media import load_video

    stored = np.zeros((56, 112, 3), np.uint8)
    stored[:, :28] = 255  # a white band at the stored frame's left edge
    _clip(tmp_path / "phone.mp4", stored, 90)  # shown turned 90 degrees counter-clockwise: band at the bottom
    _clip(tmp_path / "upright.mp4", np.ascontiguousarray(np.rot90(stored)), None)  # the same clip stored upright
    _clip(tmp_path / "plain.mp4", stored, None)
    phone = load_video({"type": "video", "path": str(tmp_path / "phone.mp4")}, n_frames=4)
    upright = load_video({"type": "video", "path": str(tmp_path / "upright.mp4")}, n_frames=4)
    assert phone.frames[0].size == upright.frames[0].size == (56, 112)
    assert np.abs(phone.as_array().astype(int) - upright.as_array().astype(int)).mean() < 8  # codec noise only
    # the encoder (what training feeds) sees the portrait grid; a clip without a rotation is left as stored
    grid = _encode(vl, {"type": "video", "path": str(tmp_path / "phone.mp4")}, video_frames=4)["video_grid_thw"]
    assert grid.tolist() == _encode(vl, {"type": "video", "path": str(tmp_path / "upright.mp4")},
                                    video_frames=4)["video_grid_thw"].tolist()
    assert load_video({"type": "video", "path": str(tmp_path / "plain.mp4")}, n_frames=4).frames[0].size == (112, 56)
