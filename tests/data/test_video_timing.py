"""Videos reach the processor with the rate their frames were really sampled at (transformers' VideoMetadata;
Qwen2.5-Omni's `fps`), so the time-aware families build temporal positions / timestamps in real seconds:
a 10 s clip and a 2 s clip, each sampled to 8 frames, are 8x and 2x slower than real time at 2 fps and must
not get the same time axis (the doctor's MM066 came from this: lmms-eval#1260, ms-swift#9955)."""

from __future__ import annotations

import re

import pytest

from mmtune.config.schema import RunConfig
from mmtune.data.encode import Encoder
from mmtune.data.media import load_video
from mmtune.data.records import Record

from .conftest import write_mp4, write_png


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("timing")
    write_mp4(d / "ten.mp4", n_frames=40, fps=4, size=(64, 64))  # 10 s
    write_mp4(d / "two.mp4", n_frames=16, fps=8, size=(64, 64))  # 2 s
    (d / "frames").mkdir()
    for i in range(8):
        write_png(d / "frames" / f"{i}.png", (30 * i, 0, 0), size=(64, 64))
    return d


def _encoder(name, **model):
    from mmtune.models.tiny import tiny_config_and_processor

    proc = tiny_config_and_processor(name)[1]
    return Encoder(proc, None, RunConfig.model_validate({"model": {"name": name, "video_frames": 8, **model}}))


def _record(path):
    return Record("v", "t:1", [{"role": "user", "content": [{"type": "video", "path": str(path)},
                                                            {"type": "text", "text": "What happens?"}]},
                               {"role": "assistant", "content": "a ball rolls"}])


def _temporal_steps(name, out):
    """Distinct temporal M-RoPE positions of the video tokens, as the model computes them."""
    from transformers import Qwen2_5_VLModel

    from mmtune.compat.rope_index import RopeIndex
    from mmtune.models.tiny import tiny_config_and_processor

    pos = RopeIndex(Qwen2_5_VLModel, tiny_config_and_processor(name)[0])(out)
    vid = out["input_ids"] == tiny_config_and_processor(name)[1].video_token_id
    return sorted(set(pos[0][vid].tolist()))


def test_qwen2_5_vl_positions_follow_the_clip_rate(clips):
    enc = _encoder("tiny/qwen2.5-vl")
    ten, two = enc.encode(_record(clips / "ten.mp4")), enc.encode(_record(clips / "two.mp4"))
    tps = enc.processor.video_processor.temporal_patch_size
    # 8 frames over 10 s = 0.8 fps, over 2 s = 4 fps: seconds per temporal patch of 2 frames
    assert ten["second_per_grid_ts"].tolist() == pytest.approx([tps * 10 / 8])
    assert two["second_per_grid_ts"].tolist() == pytest.approx([tps * 2 / 8])
    t_ten, t_two = _temporal_steps("tiny/qwen2.5-vl", ten), _temporal_steps("tiny/qwen2.5-vl", two)
    assert len(t_ten) == len(t_two) == 4
    assert t_ten[-1] - t_ten[0] == 5 * (t_two[-1] - t_two[0]) > 0  # five times the seconds, five times the span
    # by model.video_fps the rate is the one asked for (1 fps from a 4 fps source: every 4th frame)
    by_fps = _encoder("tiny/qwen2.5-vl", video_fps=1).encode(_record(clips / "ten.mp4"))
    assert by_fps["second_per_grid_ts"].tolist() == pytest.approx([tps / 1.0])


def test_qwen3_vl_timestamps_are_real_seconds(clips):
    enc = _encoder("tiny/qwen3-vl")
    for name, fps in (("ten.mp4", 4.0), ("two.mp4", 8.0)):
        r = _record(clips / name)
        text = enc.tokenizer.decode(enc.encode(r)["input_ids"])
        stamps = [float(x) for x in re.findall(r"<([\d.]+) seconds>", text)]
        idx = load_video(r.media_parts()[0], n_frames=8).indices
        want = [(idx[i] + idx[i + 1]) / 2 / fps for i in range(0, len(idx), 2)]  # mean time of each frame pair
        assert stamps == pytest.approx(want, abs=0.051), name  # the processor writes one decimal
        assert enc.measure(r) == enc.token_counts(r)  # timestamps are text: lengths still agree
    assert stamps[-1] < 2.0  # the 2 s clip's last stamp is inside it (at 24 fps assumed it would be 0.3 s)


def test_qwen2_5_omni_second_per_grid_follows_the_clip_rate(clips):
    enc = _encoder("tiny/qwen2.5-omni")
    tps = enc.processor.video_processor.temporal_patch_size
    ten, two = enc.encode(_record(clips / "ten.mp4")), enc.encode(_record(clips / "two.mp4"))
    assert ten["video_second_per_grid"].tolist() == pytest.approx([tps * 10 / 8])
    assert two["video_second_per_grid"].tolist() == pytest.approx([tps * 2 / 8])


def test_a_frames_folder_has_no_rate_and_keeps_the_processors_default(clips):
    enc = _encoder("tiny/qwen2.5-vl")
    out = enc.encode(_record(clips / "frames"))
    default = enc.processor.video_processor.default_fps
    assert out["second_per_grid_ts"].tolist() == pytest.approx([enc.processor.video_processor.temporal_patch_size / default])
