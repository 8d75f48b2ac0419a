"""Media decoding on real files made at test time: frames folders, an mp4 made with PyAV, wav/mp3 audio."""

from __future__ import annotations

import numpy as np
import pytest

from mmtune.data import media
from mmtune.errors import DataError

from .conftest import write_mp3, write_mp4, write_png, write_wav


def test_sample_indices_uniform_and_fps():
    assert media.sample_indices(20, 4) == [2, 7, 12, 17]
    assert media.sample_indices(3, 8) == [0, 1, 2]  # never more than the source has
    assert media.sample_indices(30, 8, fps=2, source_fps=10) == [0, 5, 10, 15, 20, 25]
    assert media.sample_indices(0, 8) == []


def test_image_cap_pixels_and_rgb(media_dir):
    from PIL import Image

    Image.new("L", (400, 100), 128).save(media_dir / "g.png")
    img = media.load_image({"type": "image", "path": str(media_dir / "g.png")}, "r", max_pixels=100 * 25)
    assert img.mode == "RGB" and img.size == (100, 25)


def test_video_from_frames_folder(media_dir):
    for i in range(10):
        write_png(media_dir / f"f{i:02d}.png", (20 * i, 0, 0), size=(64, 64))
    (media_dir / "notes.txt").write_text("ignored")
    clip = media.load_video({"type": "video", "path": str(media_dir)}, "r", n_frames=4, max_pixels=32 * 32)
    assert clip.source_frames == 10 and clip.indices == [1, 3, 6, 8]
    assert [f.getpixel((0, 0))[0] for f in clip.frames] == [20, 60, 120, 160]
    assert clip.frames[0].size == (32, 32) and clip.as_array().shape == (4, 32, 32, 3)


def test_video_file_uniform_and_fps(tmp_path):
    path = write_mp4(tmp_path / "c.mp4", n_frames=20, fps=10)
    clip = media.load_video({"type": "video", "path": str(path)}, "r", n_frames=5)
    assert clip.source_frames == 20 and clip.source_fps == pytest.approx(10)
    assert clip.indices == [2, 6, 10, 14, 18]
    levels = [int(np.asarray(f)[..., 0].mean()) for f in clip.frames]
    assert all(abs(lv - 10 * i) <= 6 for lv, i in zip(levels, clip.indices))  # frame i is grey 10*i
    by_fps = media.load_video({"type": "video", "path": str(path)}, "r", n_frames=5, fps=2)
    assert by_fps.indices == [0, 5, 10, 15]


def test_broken_video_and_zero_frames_are_errors(tmp_path):
    (tmp_path / "x.mp4").write_bytes(b"\x00" * 100)
    with pytest.raises(DataError) as e:
        media.load_video({"type": "video", "path": str(tmp_path / "x.mp4")}, "file:3 (record r)")
    assert "x.mp4" in str(e.value) and "file:3" in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError):
        media.load_video({"type": "video", "path": str(tmp_path / "empty")}, "r")


@pytest.mark.parametrize("writer,suffix,sr", [(write_wav, "wav", 44100), (write_mp3, "mp3", 22050)])
def test_audio_resampled_to_processor_rate(tmp_path, writer, suffix, sr):
    path = writer(tmp_path / f"a.{suffix}", seconds=1.5, sr=sr)
    wave = media.load_audio({"type": "audio", "path": str(path)}, "r", sampling_rate=16000)
    assert wave.dtype == np.float32 and wave.ndim == 1
    assert len(wave) / 16000 == pytest.approx(1.5, abs=0.08)  # mp3 adds a little encoder padding
    # Still a 440 Hz tone after resampling: the spectrum peaks there.
    spec = np.abs(np.fft.rfft(wave[2000:18000]))
    assert np.fft.rfftfreq(16000, 1 / 16000)[spec.argmax()] == pytest.approx(440, abs=3)


def test_stereo_wav_becomes_mono(tmp_path):
    path = write_wav(tmp_path / "s.wav", seconds=0.5, sr=8000, channels=2)
    wave = media.load_audio({"type": "audio", "path": str(path)}, "r", sampling_rate=16000)
    assert wave.ndim == 1 and len(wave) == pytest.approx(8000, abs=40)


def test_video_audio_track(tmp_path):
    path = write_mp4(tmp_path / "av.mp4", n_frames=10, fps=5, audio_seconds=2.0)
    wave = media.load_audio({"type": "video", "path": str(path), "use_audio": True}, "r", sampling_rate=16000)
    assert len(wave) / 16000 == pytest.approx(2.0, abs=0.1)  # AAC priming adds ~1024 samples
    silent = write_mp4(tmp_path / "silent.mp4", n_frames=4)
    with pytest.raises(DataError) as e:
        media.load_audio({"type": "video", "path": str(silent), "use_audio": True}, "rec", sampling_rate=16000)
    assert "no audio track" in str(e.value) and "use_audio" in e.value.fix


def test_unreadable_audio_names_file(tmp_path):
    (tmp_path / "bad.wav").write_bytes(b"RIFF0000WAVEjunk")
    with pytest.raises(DataError) as e:
        media.load_audio({"type": "audio", "path": str(tmp_path / "bad.wav")}, "f.jsonl:2 (record 9)")
    assert "bad.wav" in str(e.value) and "f.jsonl:2" in str(e.value)


def test_resample_in_memory():
    wave = np.sin(np.linspace(0, 200 * np.pi, 8000)).astype(np.float32)
    out = media.load_audio({"type": "audio", "audio": wave, "sampling_rate": 8000}, "r", sampling_rate=16000)
    assert len(out) == pytest.approx(16000, abs=40)


def test_unexpected_sample_rate_is_a_clear_error(tmp_path):
    import soundfile as sf

    sf.write(tmp_path / "odd.wav", np.zeros(400, dtype=np.float32), 200)  # a 200 Hz "recording"
    with pytest.raises(DataError) as e:
        media.load_audio({"type": "audio", "path": str(tmp_path / "odd.wav")}, "f.jsonl:4 (record 3)")
    assert "200" in str(e.value) and "odd.wav" in str(e.value) and "f.jsonl:4" in str(e.value)
    with pytest.raises(DataError, match="sample rate"):
        media.load_audio({"type": "audio", "audio": np.zeros(10, dtype=np.float32), "sampling_rate": 22050.5}, "r")
    ok = media.load_audio({"type": "audio", "audio": np.zeros(44100, dtype=np.float32), "sampling_rate": 44100}, "r")
    assert len(ok) == 16000  # a usual rate is resampled, not rejected


def test_an_infinite_or_nan_sample_rate_beside_samples_is_a_counted_bad_sample_rate(tmp_path):
    """datasets' decoded Audio feature written to JSONL with a rate of 1e999 (read as inf) or NaN: int() of it
    raised OverflowError / ValueError when the record was measured, reaching the record boundary as `unreadable
    record` (found by the fuzzer, tests/data/fuzz_objectives.py's asr_array); now each is the `bad sample rate` it
    is, with the record's line, in `data inspect`'s scan as in training's measure."""
    import json

    from mmtune.config.schema import RunConfig
    from mmtune.data.encode import Encoder
    from mmtune.data.inspect import scan_records
    from mmtune.data.sources import load_records

    from .malformed import tiny_processor

    samples = [0.1] * 1600
    rates = ["1e999", "-1e999", "NaN", "true", "16000"]
    lines = [f'{{"audio": {{"array": {json.dumps(samples)}, "sampling_rate": {r}}}, "sentence": "a tone"}}' for r in rates]
    path = tmp_path / "asr.jsonl"
    path.write_text("\n".join(lines) + "\n")
    cfg = RunConfig.model_validate({"model": {"name": "tiny/qwen2-audio"}, "data": {"format": "asr", "on_bad_record": "skip"}})
    rs = load_records(str(path), cfg.data)
    for encode in (False, True):
        scan = scan_records(rs, Encoder(*tiny_processor("tiny/qwen2-audio"), cfg), "skip", encode=encode)
        assert len(scan.records.records) == 1 and scan.records.skipped == {"bad sample rate": 4}, scan.records.problems
        assert [w.split(" ")[0] for w, _ in scan.records.problems] == [f"{path}:{i}" for i in range(1, 5)]


def test_a_non_number_deep_in_a_sample_array_is_a_bad_type_at_load(tmp_path):
    """datasets' decoded audio whose array holds a null or a string past its 16th sample (found by the fuzzer, seed 0:
    tests/data/fuzz_objectives.py's asr_array): only the first 16 samples were checked, and numpy raised TypeError
    when the clip was measured, at the `unreadable record` boundary. Every sample is checked when the row is read."""
    import json

    from mmtune.config.schema import DataConfig
    from mmtune.data.sources import load_records

    rows = []
    for bad in (None, "x", [1.0]):
        samples = [0.1] * 1600
        samples[800] = bad
        rows.append({"audio": {"array": samples, "sampling_rate": 16000}, "sentence": "a tone"})
    rows.append({"audio": {"array": [0.1] * 1600, "sampling_rate": 16000}, "sentence": "a tone"})
    path = tmp_path / "asr.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rs = load_records(str(path), DataConfig(format="asr", on_bad_record="skip"))
    assert len(rs.records) == 1 and rs.skipped == {"bad type": 3}, rs.problems
    assert [w for w, _ in rs.problems] == [f"{path}:{i}" for i in range(1, 4)]
