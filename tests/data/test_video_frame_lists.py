"""A video given as the list of its frames' files: Qwen's own message layout, as qwen_vl_utils reads it
(`{"type": "video", "video": ["file:///f1.jpg", ...]}`, the Qwen2-VL / Qwen2.5-VL README), and LLaMA-Factory's
`videos: [["f1.jpg", "f2.jpg", ...]]`. mmtune refused both as a "bad type" with the fix to make a folder of the
frames. Now they are the video those frames make, read as a folder of the same frames is (uniform sampling, no
frame rate), measured without decoding as encoded, and a missing frame is that record's "missing media"."""

from __future__ import annotations

import json

import pytest

from mmtune.config.schema import DataConfig
from mmtune.data.sources import load_records

from .conftest import write_png

N = 8  # frames in the clip, all sampled (model.video_frames=N)


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    d = tmp_path_factory.mktemp("clip")
    (d / "frames").mkdir()
    for i in range(N):  # a colour per frame, so sampling the wrong frames or order changes the pixels
        write_png(d / "frames" / f"{i:02d}.png", colour=(30 * i, 200 - 20 * i, 90), size=(56, 56))
    return d


@pytest.fixture(scope="module")
def encoder():
    from mmtune.config.schema import RunConfig
    from mmtune.data.encode import Encoder
    from mmtune.models.tiny import tiny_config_and_processor

    proc = tiny_config_and_processor("tiny/qwen2-vl")[1]
    return Encoder(proc, None, RunConfig.model_validate({"model": {"name": "tiny/qwen2-vl", "video_frames": N}}))


def _write(d, rows, name="v.jsonl"):
    f = d / name
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def _video_msg(video) -> dict:
    return {"messages": [{"role": "user", "content": [{"type": "video", "video": video},
                                                      {"type": "text", "text": "What happens?"}]},
                         {"role": "assistant", "content": "a colour change"}]}


def test_listed_frame_files_are_the_video_a_folder_of_them_is(frames, encoder):
    names = [f"frames/{i:02d}.png" for i in range(N)]
    f = _write(frames, [
        _video_msg("frames"),  # the folder
        _video_msg([f"file://{frames / n}" for n in names]),  # qwen_vl_utils
        {"conversations": [{"from": "human", "value": "<video>What happens?"}, {"from": "gpt", "value": "a colour change"}],
         "videos": [names]},  # LLaMA-Factory
    ])
    rs = load_records(str(f), DataConfig(on_bad_record="skip"))
    assert rs.skipped == {} and len(rs) == 3, rs.problems
    folder, qwen, llamafactory = (encoder.encode(r) for r in rs)
    for got in (qwen, llamafactory):
        assert got["pixel_values_videos"].equal(folder["pixel_values_videos"])
        assert got["video_grid_thw"].equal(folder["video_grid_thw"])
    # measured without decoding a frame as encoded (the scan, the doctor and the planner count this way)
    for r, enc in zip(rs, (folder, qwen, llamafactory)):
        assert encoder.measure(r)["total"] == int(enc["input_ids"].numel())


def test_the_list_order_is_the_clip_order(frames, encoder):
    names = [str(frames / "frames" / f"{i:02d}.png") for i in range(N)]
    f = _write(frames, [_video_msg(names), _video_msg(names[::-1])], "o.jsonl")
    forward, backward = (encoder.encode(r) for r in load_records(str(f), DataConfig()))
    assert not forward["pixel_values_videos"].equal(backward["pixel_values_videos"])


def test_a_missing_frame_is_the_records_missing_media(frames):
    names = [str(frames / "frames" / f"{i:02d}.png") for i in range(N)]
    f = _write(frames, [_video_msg(names[:3] + ["frames/gone.png"] + names[4:]), _video_msg(names)], "m.jsonl")
    rs = load_records(str(f), DataConfig(on_bad_record="skip"))
    assert len(rs) == 1 and rs.skipped == {"missing media": 1}
    assert "gone.png" in rs.problems[0][1]


def test_a_frame_given_as_a_data_url_is_refused_by_name(frames):
    f = _write(frames, [_video_msg(["data:image/png;base64,iVBORw0KGgo=", "frames/00.png"]), _video_msg("frames")],
               "d.jsonl")
    rs = load_records(str(f), DataConfig(on_bad_record="skip"))
    assert rs.problems and "video frame given as a data: URL" in rs.problems[0][1]
