"""Fixtures that write tiny real-format media files at test time (no committed binaries)."""

from __future__ import annotations

import numpy as np
import pytest


def write_png(path, colour=(200, 30, 30), size=(64, 48)):
    from PIL import Image

    Image.new("RGB", size, colour).save(path)
    return path


def write_wav(path, seconds=1.0, sr=44100, freq=440.0, channels=1):
    import soundfile as sf

    t = np.arange(int(seconds * sr)) / sr
    wave = 0.3 * np.sin(2 * np.pi * freq * t).astype(np.float32)
    data = np.stack([wave] * channels, axis=1) if channels > 1 else wave
    sf.write(str(path), data, sr)
    return path


def write_mp3(path, seconds=1.0, sr=22050, freq=440.0):
    import av

    t = np.arange(int(seconds * sr)) / sr
    wave = (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libmp3lame", rate=sr)
        stream.layout = "mono"
        frame_size = 1152
        for i in range(0, len(wave), frame_size):
            chunk = wave[i:i + frame_size]
            frame = av.AudioFrame.from_ndarray(chunk[None, :], format="fltp", layout="mono")
            frame.sample_rate = sr
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def write_mp4(path, n_frames=20, fps=10, size=(64, 48), audio_seconds=None, audio_sr=22050):
    """An H.264 (or MPEG-4) clip whose frame i is a flat grey of level 10*i, optionally with an AAC track."""
    import av

    with av.open(str(path), "w") as out:
        codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
        vs = out.add_stream(codec, rate=fps)
        vs.width, vs.height = size
        vs.pix_fmt = "yuv420p"
        as_ = None
        if audio_seconds:
            as_ = out.add_stream("aac", rate=audio_sr)
            as_.layout = "mono"
        for i in range(n_frames):
            arr = np.full((size[1], size[0], 3), min(255, 10 * i), dtype=np.uint8)
            for packet in vs.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                out.mux(packet)
        for packet in vs.encode(None):
            out.mux(packet)
        if as_ is not None:
            n = int(audio_seconds * audio_sr)
            wave = (0.3 * np.sin(2 * np.pi * 440 * np.arange(n) / audio_sr)).astype(np.float32)
            fs = as_.codec_context.frame_size or 1024
            for i in range(0, n, fs):
                frame = av.AudioFrame.from_ndarray(wave[None, i:i + fs], format="fltp", layout="mono")
                frame.sample_rate = audio_sr
                frame.pts = i
                for packet in as_.encode(frame):
                    out.mux(packet)
            for packet in as_.encode(None):
                out.mux(packet)
    return path


@pytest.fixture
def media_dir(tmp_path):
    d = tmp_path / "media"
    d.mkdir()
    return d


def jsonl(path, rows):
    import json

    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture
def imgs(tmp_path):
    """Two small PNGs (a.png, b.png) in a test folder."""
    write_png(tmp_path / "a.png")
    write_png(tmp_path / "b.png", (0, 0, 200))
    return tmp_path


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """An Encoder for tiny/qwen2-vl (data.max_length=512): no weights built, one per test module."""
    from mmtune.config import load_config
    from mmtune.data.encode import Encoder

    from .malformed import tiny_processor

    cfg_path = tmp_path_factory.mktemp("encoder") / "cfg.yaml"
    cfg_path.write_text("output_dir: out\nmodel: {name: tiny/qwen2-vl}\ndata: {train: x, max_length: 512}\n")
    return Encoder(*tiny_processor("tiny/qwen2-vl"), load_config(cfg_path, []))
