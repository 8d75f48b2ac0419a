"""Public bug reports, batch 8 (docs/doctor.md): failures specific to one family's processor or model class.
Each test rebuilds the report's setup with the family's own processor part and checks what the run does (the
tokens a video costs, the positions it gets), and keeps the clean twin.
"""

from __future__ import annotations

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
