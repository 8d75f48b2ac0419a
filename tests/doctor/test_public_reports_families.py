"""Public bug reports, batch 8 (docs/doctor.md): failures specific to one family's processor or model class.
Each test rebuilds the report's setup with the family's own processor part and checks what the run does (the
tokens a video costs, the positions it gets), and keeps the clean twin.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

# ----------------------------------------------------------------------------- Qwen3-VL: a per-clip pixel budget
# https://github.com/huggingface/transformers/issues/48062, https://github.com/huggingface/transformers/pull/48071,
# https://github.com/QwenLM/Qwen3-VL/issues/1836: Qwen3-VL's video processor reads size["longest_edge"] as the
# pixels of the whole clip (t * h * w), not of one frame as Qwen2-VL / Qwen2.5-VL do. mmtune wrote
# model.max_pixels ("max pixels per image/frame") into it as it is: on the GPU machine (the real processor) a
# 16-frame clip under max_pixels=50176 got 64 patches, 4 frames 96 (more frames, smaller frames), while the
# CPU stand-in the doctor and the planner count with gave 1536 and 384.

def _video_parts():
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    from mmtune.models.video_frames import FramesVideoProcessor

    real = Qwen3VLVideoProcessor(patch_size=16, merge_size=2, temporal_patch_size=2)
    stand_in = FramesVideoProcessor(patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=4096,
                                    max_pixels=16384)
    return real, stand_in


@pytest.mark.parametrize("max_pixels", [50176, 200704])
def test_qwen3_vl_video_max_pixels_caps_each_frame_not_the_clip(max_pixels):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    from mmtune.resolve.processor import read_pixel_caps, set_pixel_caps

    real, stand_in = _video_parts()
    for part in (real, stand_in):
        set_pixel_caps(SimpleNamespace(video_processor=part), None, max_pixels)
    assert read_pixel_caps(SimpleNamespace(video_processor=real))["video_processor"][1] == max_pixels
    h, w = smart_resize(480, 640, factor=32, min_pixels=4096, max_pixels=max_pixels)  # one frame, capped alone
    for frames in (4, 16, 64):
        per_frame = (frames // 2) * (h // 16) * (w // 16)
        assert real.get_num_of_video_patches(frames, 480, 640) == per_frame, frames
        assert stand_in.get_num_of_video_patches(frames, 480, 640) == per_frame, frames


def test_qwen3_vl_video_processor_left_as_it_is_without_a_cap():
    from mmtune.resolve.processor import set_pixel_caps

    real, _ = _video_parts()
    before = (dict(real.size), real.cap_pixels_per_frame, real.get_num_of_video_patches(16, 480, 640))
    set_pixel_caps(SimpleNamespace(video_processor=real), None, None)
    assert (dict(real.size), real.cap_pixels_per_frame, real.get_num_of_video_patches(16, 480, 640)) == before


# ----------------------------------------------------------------------------- Qwen2.5-VL: frames sharing a time
# https://github.com/QwenLM/Qwen3-VL/issues/1031 ("Videos > 5 FPS have frames that overlap in time, because
# tokens_per_second is 2"), https://github.com/EvolvingLMMs-Lab/lmms-eval/issues/1393 ("fps > 2 can break
# temporal position ids"): Qwen2.5-VL's temporal position advances tokens_per_second a second, one step per
# temporal patch (2 frames), truncated to an integer. mmtune hands the processor the real sampled rate, so a
# short clip sampled uniformly (8 frames of a 1 s clip: 8 fps) gets second_per_grid_ts 0.25 and, with the real
# model's tokens_per_second=2, its 4 temporal patches share 2 positions. The doctor was silent.

def _mp4(path, frames: int, rate: int):
    import av
    import numpy as np

    rs = np.random.RandomState(0)
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=rate)
        vs.width, vs.height, vs.pix_fmt = 64, 48, "yuv420p"
        for _ in range(frames):
            out.mux(vs.encode(av.VideoFrame.from_ndarray(rs.randint(0, 255, (48, 64, 3), dtype=np.uint8),
                                                         format="rgb24")))
        out.mux(vs.encode(None))
    return path.name


def _video_ctx(tmp_path, clip: str, **model):
    import json

    from doctor_helpers import context_for

    from mmtune.models.tiny import tiny_config_and_processor

    f = tmp_path / f"{clip}.jsonl"
    row = {"messages": [{"role": "user", "content": "<video>What happens?"}, {"role": "assistant", "content": "a"}],
           "videos": [clip]}
    f.write_text((json.dumps(row) + "\n") * 2)
    ctx = context_for(tmp_path, {"model": {"name": "tiny/qwen2.5-vl", **model}, "data": {"train": str(f)}})
    config, _ = tiny_config_and_processor("tiny/qwen2.5-vl")
    config.vision_config.tokens_per_second = 2  # the released Qwen2.5-VL's (the twin's is 4)
    ctx.put("model_config", config)
    return ctx, config


def test_premise_a_fast_sampled_clip_gives_frame_groups_one_temporal_position(tmp_path):
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    from mmtune.compat.rope_index import RopeIndex
    from mmtune.data.encode import Encoder
    from mmtune.data.sources import load_records

    _mp4(tmp_path / "one_second.mp4", frames=10, rate=10)
    ctx, config = _video_ctx(tmp_path, "one_second.mp4")
    enc = Encoder.for_run(ctx.need("resolved"))
    out = enc.encode(load_records(str(tmp_path / "one_second.mp4.jsonl"), ctx.need("cfg").data)[0])
    assert out["video_grid_thw"].tolist() == [[4, 4, 4]] and float(out["second_per_grid_ts"]) == 0.25
    pos = RopeIndex(Qwen2_5_VLModel, config)(out)[0][out["mm_token_type_ids"].reshape(-1) == 2]
    assert len(set(pos.tolist())) == 2  # 4 temporal patches, 2 positions


def test_frames_sampled_faster_than_the_time_axis_is_a_warning(tmp_path):
    from doctor_helpers import run_codes

    _mp4(tmp_path / "one_second.mp4", frames=10, rate=10)
    _mp4(tmp_path / "twenty_seconds.mp4", frames=40, rate=2)
    ctx, _ = _video_ctx(tmp_path, "one_second.mp4")  # 8 frames (model.video_frames) of 1 s
    found = [f for f in run_codes(ctx, "MM066").findings if f.code == "MM066"]
    assert len(found) == 1 and found[0].severity == "warning", found
    assert "8 fps" in found[0].message and "one_second.mp4.jsonl:1" in found[0].where
    assert "model.video_fps=2" in found[0].fix
    for clip, model in (("twenty_seconds.mp4", {}), ("one_second.mp4", {"video_fps": 4.0})):
        ctx, _ = _video_ctx(tmp_path, clip, **model)  # 0.4 fps; 4 fps, the fastest that keeps every step
        assert run_codes(ctx, "MM066").findings == [], clip


# ----------------------------------------------------------------------------- LLaVA processor without patch_size
# https://github.com/Blaizzy/mlx-vlm/issues/93, https://github.com/MNeMoNiCuZ/joy-caption-batch/issues/28,
# https://github.com/huggingface/transformers/pull/33424: "Expanding inputs for image tokens in LLaVa should be done
# in processing. Please add `patch_size` and `vision_feature_select_strategy`". A folder saved before that has
# neither in processor_config.json; the doctor blamed every record (MM018, "unsupported operand type(s) for //")
# and then found no usable record (MM031). Now the folder's processor file is named once, with the values to add.

def _llava_folder(tmp_path, drop: tuple[str, ...]):
    from mmtune.models.tiny import build_tiny

    model, proc = build_tiny("tiny/llava")
    folder = tmp_path / ("old" if drop else "whole")
    model.save_pretrained(folder)
    proc.save_pretrained(folder)
    raw = json.loads((folder / "processor_config.json").read_text())
    for k in drop:
        raw.pop(k)
    (folder / "processor_config.json").write_text(json.dumps(raw))
    return folder


def test_llava_processor_saved_without_patch_size_is_the_folders_error(tmp_path, doctor):
    tree = {"model": {"name": None}, "data": {"train": "synthetic:counting", "synthetic_train_size": 4},
            "adapter": {"train_components": ["projector"]}}
    old = _llava_folder(tmp_path, ("patch_size", "vision_feature_select_strategy"))
    rep = doctor({**tree, "model": {"name": str(old)}}, "MM002", "MM018", "MM031")
    said = [f for f in rep.errors if "no patch_size" in f.message]
    assert said and said[0].where.endswith("processor_config.json"), rep.findings
    assert '"patch_size": 14' in said[0].fix and '"vision_feature_select_strategy": "default"' in said[0].fix
    assert not [f for f in rep.findings if f.code in ("MM018", "MM031")], rep.findings  # not every record's fault
    whole = _llava_folder(tmp_path, ())
    clean = doctor({**tree, "model": {"name": str(whole)}}, "MM002", "MM018", "MM031")
    assert clean.errors == [], clean.errors
