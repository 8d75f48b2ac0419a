"""Broken setups from the 28th batch of public bug reports (docs/doctor.md, "Public bug reports, batch 28: video data
beyond the basics: frame sampling, fps and timing, long clips, video backends"). Each builds the file users had (a
folder of frames named by ffmpeg's `%d`, a WebM as yt-dlp saves it, a clip slower than `model.video_fps`, a sound-only
MP4 given as a video) and runs it through what `mmtune train` and `mmtune doctor` run: the media loader, the
encoder's header count (the start-up scan) and the doctor's checks, on the tiny Qwen2-VL / Qwen2.5-VL.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from mmtune.data.encode import Encoder
from mmtune.data.formats import BadRecord
from mmtune.data.records import Record


def _clip(path, frames: int, rate: int = 10, size=(64, 48), codec: str = "mpeg4", shade=None):
    """A clip whose frame i is one flat grey (i * 8 by default): which frames were taken can be read back."""
    import av

    w, h = size
    with av.open(str(path), "w") as out:
        vs = out.add_stream(codec, rate=rate)
        vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
        for i in range(frames):
            grey = (i * 8) % 256 if shade is None else shade(i)
            out.mux(vs.encode(av.VideoFrame.from_ndarray(np.full((h, w, 3), grey, np.uint8), format="rgb24")))
        out.mux(vs.encode(None))
    return path


def _record(part: dict) -> Record:
    return Record(id="r1", source="d.jsonl:1", messages=[
        {"role": "user", "content": [part, {"type": "text", "text": "What happens?"}]},
        {"role": "assistant", "content": "people talk"}])


@pytest.fixture(scope="module")
def vl():
    from mmtune.models.tiny import tiny_config_and_processor

    return tiny_config_and_processor("tiny/qwen2-vl")[1]


# ---------------------------------------------------------------------------- frames folder in clip order
# https://github.com/jfzhang95/pytorch-video-recognition/issues/30, https://github.com/Kosinkadink/ComfyUI-VideoHelperSuite/issues/131,
# https://github.com/roboflow/trackers/pull/558, https://github.com/cvat-ai/cvat/issues/3270: frames cut as 1.jpg ...
# 10.jpg (ffmpeg's `%d`) and listed with a string sort come out 1, 10, 11, 2, ...: a shuffled clip, nothing raised.

def test_a_frames_folder_numbered_without_padding_is_read_in_clip_order(tmp_path):
    from PIL import Image

    from mmtune.data.media import load_video

    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(1, 13):  # 1.png ... 12.png, frame i is grey i * 20
        Image.new("RGB", (56, 56), (i * 20,) * 3).save(folder / f"{i}.png")
    clip = load_video({"type": "video", "path": str(folder)}, n_frames=12)
    greys = [f.getpixel((0, 0))[0] for f in clip.frames]
    assert greys == [i * 20 for i in range(1, 13)]
    padded = tmp_path / "padded"  # zero-padded names keep their order
    padded.mkdir()
    for i in range(1, 13):
        Image.new("RGB", (56, 56), (i * 20,) * 3).save(padded / f"frame_{i:04d}.png")
    assert [f.getpixel((0, 0))[0] for f in load_video({"type": "video", "path": str(padded)}, n_frames=12).frames] == greys


# ---------------------------------------------------------------------------- WebM / MKV: no frame count in the header
# https://github.com/PyAV-Org/PyAV/issues/1131 ("Frames count for WEBM video always 0", a yt-dlp download),
# https://github.com/MrinalJain17/mydia/issues/18, https://github.com/aetilius/pHash/pull/63; and the memory it costs
# to sample a long clip by decoding all of it: https://github.com/QwenLM/Qwen3-VL/issues/1938 (a 10-minute 854x480
# clip killed a 64 GB machine), https://github.com/EvolvingLMMs-Lab/lmms-eval/issues/283, https://github.com/showlab/Q2A/issues/3.
# Without a frame count the loader kept every decoded frame to sample from afterwards.

_PEAK = """
import json, re, sys
from mmtune.data.media import load_video

def hwm():  # the process's peak resident memory (KiB)
    return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))

open("/proc/self/clear_refs", "w").write("5")  # the peak restarts from here (Linux >= 4.0)
start = hwm()
clip = load_video({"type": "video", "path": sys.argv[1]}, n_frames=8)
print(json.dumps([len(clip.frames), clip.source_frames, clip.indices, hwm() - start]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak from /proc/self/status")
def test_a_long_matroska_clip_is_sampled_without_holding_every_frame(tmp_path):
    """The peak memory of sampling 8 of the same 300 frames (480x360: ~150 MiB as RGB images) from a Matroska and an
    MP4 file, each in a fresh process."""
    import os

    got = {}
    for name in ("long.mkv", "long.mp4"):
        _clip(tmp_path / name, 300, rate=30, size=(480, 360))
        out = subprocess.run([sys.executable, "-c", _PEAK, str(tmp_path / name)], capture_output=True, text=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1"), check=True)
        got[name] = json.loads(out.stdout.splitlines()[-1])
    assert got["long.mkv"][:3] == got["long.mp4"][:3] and got["long.mp4"][:2] == [8, 300]  # the same frames taken
    # KiB: the MKV's peak grows about as the MP4's (~33 MiB here), not by the 150 MiB of frames (244 MiB before the fix)
    assert got["long.mkv"][3] < got["long.mp4"][3] + 50 * 1024, got


def _run_encoder(tmp_path, name: str = "tiny/qwen2-vl", **model):
    """The encoder `mmtune train` builds for the run (its family known: the header count path)."""
    from doctor_helpers import context_for

    ctx = context_for(tmp_path, {"model": {"name": name, **model}, "data": {"train": "synthetic:counting"}})
    return Encoder.for_run(ctx.need("resolved"))


def test_a_webm_shorter_than_video_frames_is_refused_at_start(tmp_path):
    """The start-up scan counts a clip's frames from its header (Encoder.measure); a WebM's header has none, so a
    3-frame clip passed it and stopped the run mid-training ("found while training: the start-up check reads media
    headers only")."""
    _clip(tmp_path / "short.webm", 3, codec="libvpx")
    enc = _run_encoder(tmp_path)  # model.video_frames=8
    with pytest.raises(BadRecord) as e:
        enc.measure(_record({"type": "video", "path": str(tmp_path / "short.webm")}))
    assert e.value.reason == "video too short" and "3 frame(s)" in e.value.what
    _clip(tmp_path / "long.webm", 20, codec="libvpx")
    rec = _record({"type": "video", "path": str(tmp_path / "long.webm")})
    assert enc.measure(rec) == enc.token_counts(rec)  # the header count is the encoded one


# ---------------------------------------------------------------------------- sampled rate the doctor computes
# MM066 (batch 8) warns when frames are taken faster than Qwen2.5-VL's time axis resolves. It took the clip's seconds
# from the stream header (none in a WebM: silent) and the rate from model.video_fps alone: a 3 fps clip at video_fps=8
# gives its 9 frames (the loader never repeats a frame), yet was warned about as 8 fps. Reports of a frame count
# asked above what the clip has: https://github.com/EvolvingLMMs-Lab/lmms-eval/issues/874,
# https://github.com/EvolvingLMMs-Lab/lmms-eval/pull/1433.

def _rate_ctx(tmp_path, clip: str, **model):
    from test_public_reports_families import _video_ctx  # the released Qwen2.5-VL's time scale on the twin

    return _video_ctx(tmp_path, clip, **model)[0]


def test_mm066_reads_a_webms_length_and_the_rate_frames_are_really_taken_at(tmp_path):
    from doctor_helpers import run_codes

    _clip(tmp_path / "one_second.webm", 10, rate=10, codec="libvpx")  # 8 frames of 1 s: 8 fps
    found = [f for f in run_codes(_rate_ctx(tmp_path, "one_second.webm"), "MM066").findings if f.code == "MM066"]
    assert len(found) == 1 and "8 fps" in found[0].message, found
    _clip(tmp_path / "slow.mp4", 9, rate=3)  # 3 s at 3 fps: video_fps=8 takes its 9 frames, 3 a second
    assert run_codes(_rate_ctx(tmp_path, "slow.mp4", video_fps=8.0), "MM066").findings == []

    from mmtune.data.media import load_video
    from mmtune.data.media_probe import video_shape

    part = {"type": "video", "path": str(tmp_path / "slow.mp4")}  # the header count is the loader's
    assert video_shape(part, 8, 8.0)[0] == len(load_video(part, n_frames=8, fps=8.0).frames) == 9


# ---------------------------------------------------------------------------- pins
# decord and torchvision: https://github.com/dmlc/decord/issues/290 (no wheel for Apple silicon),
# https://github.com/QwenLM/Qwen3-VL/issues/1892 and https://github.com/QwenLM/Qwen3-VL/pull/1891 (decord hangs without
# a word; qwen_vl_utils' FORCE_QWENVL_VIDEO_READER), torchvision's video decoding deprecated in 0.22. mmtune decodes
# with PyAV, a dependency of its own: the encoder reads and encodes a clip with neither package importable.

_NO_BACKENDS = """
import sys
for name in ("decord", "torchvision", "torchcodec"):
    sys.modules[name] = None  # importing them raises ImportError
from mmtune.config.schema import RunConfig
from mmtune.data.encode import Encoder
from mmtune.data.records import Record
from mmtune.models.tiny import tiny_config_and_processor
proc = tiny_config_and_processor("tiny/qwen2-vl")[1]
rec = Record(id="r", source="d.jsonl:1", messages=[
    {"role": "user", "content": [{"type": "video", "path": sys.argv[1]}, {"type": "text", "text": "What?"}]},
    {"role": "assistant", "content": "a"}])
out = Encoder(proc, None, RunConfig.model_validate({"model": {"name": "tiny/qwen2-vl"}})).encode(rec)
print(out["video_grid_thw"].tolist())
"""


def test_video_decoding_needs_neither_decord_nor_torchvision(tmp_path):
    _clip(tmp_path / "c.mp4", 20)
    out = subprocess.run([sys.executable, "-c", _NO_BACKENDS, str(tmp_path / "c.mp4")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("[[4, 4, 4]]")


# A sound-only file given as a video: https://github.com/dmlc/decord/issues/162 ("cannot find video stream with wanted
# index: -1"), https://github.com/pytorch/vision/issues/3889 and https://github.com/pytorch/pytorch/issues/94978
# (torchvision's read_video hands back an empty (0, 1, 1, 3) tensor). Refused by the header probe, with the file named.

def test_a_sound_only_file_given_as_a_video_is_refused_by_its_header(tmp_path):
    import av

    with av.open(str(tmp_path / "voice.mp4"), "w") as out:
        st = out.add_stream("aac", rate=16000)
        wave = (0.3 * np.sin(np.arange(16000) * 2 * np.pi * 440 / 16000)).astype(np.float32)
        for i in range(0, len(wave), 1024):
            frame = av.AudioFrame.from_ndarray(wave[None, i:i + 1024], format="fltp", layout="mono")
            frame.sample_rate = 16000
            out.mux(st.encode(frame))
        out.mux(st.encode(None))
    with pytest.raises(BadRecord) as e:
        _run_encoder(tmp_path).measure(_record({"type": "video", "path": str(tmp_path / "voice.mp4")}))
    assert "voice.mp4" in e.value.what and "no video stream" in e.value.what and "an audio part" in e.value.fix


# A clip given as frames of different sizes (a folder holding a rotated or re-cut frame). qwen_vl_utils and
# transformers' video processors stack the frames: "all input arrays must have the same shape", naming no frame.
# mmtune's start-up scan read the first frame's header only, so `mmtune train` stopped mid-run with that message
# ("reading the record raised ValueError ... found while training"); the doctor's MM014 said "unreadable record" with
# "report it to mmtune". Now the frames the loader takes must share one size, checked from their headers at start.

def test_frames_of_different_sizes_are_refused_at_start_naming_them(tmp_path):
    from PIL import Image

    from mmtune.data.media import load_video

    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(8):
        Image.new("RGB", (48, 64) if i == 3 else (64, 48), (i * 30, 0, 0)).save(folder / f"{i}.png")
    part = {"type": "video", "path": str(folder)}
    with pytest.raises(BadRecord) as e:
        _run_encoder(tmp_path).measure(_record(part))  # the start-up scan: headers only
    assert e.value.reason == "bad media" and "0.png is 64x48, 3.png is 48x64" in e.value.what and "one size" in e.value.fix
    with pytest.raises(BadRecord, match="differ in size"):
        load_video(part, n_frames=8)  # the loader (doctor's decode pass, training) says the same
    Image.new("RGB", (64, 48), (90, 0, 0)).save(folder / "3.png")  # one size: read
    assert len(load_video(part, n_frames=8).frames) == 8
