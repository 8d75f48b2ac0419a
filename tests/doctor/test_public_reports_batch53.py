"""Public bug reports, batch 53 (docs/doctor.md): long audio and long video inputs -- encoder windows, clip
lengths read from headers, frame budgets. Each test rebuilds a thread's setup on a tiny twin with media written
here (a 45 s WAV, a VBR mp3 without a Xing frame, an MP4 with a 40 s sound track, a 60 s clip)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mmtune.config.schema import RunConfig
from mmtune.data.encode import Encoder
from mmtune.data.formats import BadRecord
from mmtune.data.records import Record
from tests.data.conftest import write_mp4


def _rec(*parts) -> Record:
    return Record("r", "f.jsonl:1", [{"role": "user", "content": [*parts, {"type": "text", "text": "What?"}]},
                                     {"role": "assistant", "content": "hi"}])


def _encoder(name: str, **model):
    from mmtune.models.tiny import build_tiny

    _, proc = build_tiny(name, seed=0)
    return Encoder(proc, None, RunConfig.model_validate({"model": {"name": name, **model}}))


def _vbr_mp3_without_xing(path: Path, loud: float, silent: float, rate: int = 16000) -> None:
    """A VBR mp3 with no Xing / VBRI frame: loud (high-bitrate) first seconds, then silence (low bitrate), so
    FFmpeg's size / first-frames-bitrate estimate of its length is far short of the sound it holds."""
    import av

    rng = np.random.default_rng(0)
    wave = np.concatenate([rng.uniform(-0.9, 0.9, int(loud * rate)), np.zeros(int(silent * rate))]).astype(np.float32)
    with av.open(str(path), "w", options={"write_xing": "0"}) as out:
        s = out.add_stream("libmp3lame", rate=rate)
        s.layout = "mono"
        s.codec_context.qscale = 9
        s.codec_context.flags |= 0x0002  # AV_CODEC_FLAG_QSCALE: variable bitrate
        fs = s.codec_context.frame_size or 1152
        for i in range(0, len(wave), fs):
            frame = av.AudioFrame.from_ndarray(wave[None, i:i + fs], format="fltp", layout="mono")
            frame.sample_rate, frame.pts = rate, i
            for packet in s.encode(frame):
                out.mux(packet)
        for packet in s.encode(None):
            out.mux(packet)


def test_a_vbr_mp3_past_the_window_is_timed_by_its_packets_and_refused_at_start(tmp_path):
    """https://github.com/fooyin/fooyin/issues/1516 and others: a VBR mp3 without a Xing header reads a wrong
    length ("Estimating duration from bitrate"). The start-up scan took 9.7 s for 43 s of sound: the clip
    passed model.audio_max_seconds=30 with a quarter of its tokens and was refused mid-run by the loader."""
    import av

    from mmtune.data import media, media_probe

    if "libmp3lame" not in av.codecs_available:
        pytest.skip("this PyAV has no mp3 encoder")
    path = tmp_path / "vbr.mp3"
    _vbr_mp3_without_xing(path, loud=3, silent=40)
    part = {"type": "audio", "path": str(path)}
    decoded = len(media.load_audio(part)) / 16000
    assert decoded > 42
    assert abs(media_probe.audio_seconds(part) - decoded) < 0.1  # the header estimate was 9.7 s
    enc = _encoder("tiny/qwen2-audio")
    with pytest.raises(BadRecord, match=r"lasts 43\.\d s, over model.audio_max_seconds=30"):
        enc.measure(_rec(part))  # the start-up scan's path


def test_a_wav_past_the_30s_window_is_refused_at_start_not_cut(tmp_path):
    """https://github.com/QwenLM/Qwen2-Audio/issues/57, https://github.com/QwenLM/Qwen-Audio/issues/10: Qwen2-Audio
    hears the first 30 s and the rest is cut silently. mmtune's default cap is the window: a 45 s clip is the
    record's error at start; a 20 s clip counts 25 tokens a second (500)."""
    import soundfile as sf

    rate = 16000
    for seconds in (45, 20):
        sf.write(tmp_path / f"{seconds}.wav", (0.3 * np.sin(np.arange(seconds * rate) / 7)).astype(np.float32), rate)
    enc = _encoder("tiny/qwen2-audio")
    with pytest.raises(BadRecord, match=r"lasts 45\.0 s, over model.audio_max_seconds=30"):
        enc.measure(_rec({"type": "audio", "path": str(tmp_path / "45.wav")}))
    assert enc.measure(_rec({"type": "audio", "path": str(tmp_path / "20.wav")}))["audio"] == 500


def test_an_omni_videos_sound_track_past_the_cap_is_refused_at_start(tmp_path):
    """https://github.com/KD-TAO/OmniZip/issues/14, https://github.com/QwenLM/Qwen2.5-Omni/issues/221: a long
    video's own sound track under use_audio is cut by the processor. Its track is measured whole at start."""
    from mmtune.compat.transformers_internals import supports_video_audio_tracks

    if not supports_video_audio_tracks():
        pytest.skip("this transformers cannot interleave a video's audio track")
    write_mp4(tmp_path / "av.mp4", n_frames=8, fps=4, size=(64, 64), audio_seconds=40.0, audio_sr=16000)
    enc = _encoder("tiny/qwen2.5-omni", video_frames=4)
    with pytest.raises(BadRecord, match=r"av.mp4 lasts 40\.0 s, over model.audio_max_seconds=30"):
        enc.measure(_rec({"type": "video", "path": str(tmp_path / "av.mp4"), "use_audio": True}))


def test_a_long_clip_sampled_by_fps_keeps_every_second_none_cut_from_the_end(tmp_path):
    """https://github.com/QwenLM/Qwen3-VL/issues/852, https://github.com/QwenLM/Qwen3-VL/issues/93: qwen_vl_utils
    caps fps sampling at 768 frames. mmtune has no hidden cap: a 60 s clip at model.video_fps=2 is 120 frames
    (60 temporal patches) over the whole clip; a fixed model.video_frames spreads its frames over all of it."""
    from mmtune.data import media

    write_mp4(tmp_path / "long.mp4", n_frames=240, fps=4, size=(32, 32))
    part = {"type": "video", "path": str(tmp_path / "long.mp4")}
    assert _encoder("tiny/qwen2-vl", video_fps=2.0).measure(_rec(part))["video"] == 60 * 4  # 4 tokens a patch
    assert _encoder("tiny/qwen2-vl").measure(_rec(part))["video"] == 4 * 4
    clip = media.load_video(part, n_frames=8)
    assert clip.indices[-1] >= 220  # the last frame taken is near the clip's end
