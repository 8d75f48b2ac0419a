"""Regressions found by benchmarks/malformed_data.py (an adversary of malformed data driven through the CLI):
each was a hang, a traceback or a silent pass before its fix."""

from __future__ import annotations

import os
import signal

import pytest

from mmtune.errors import DataError


@pytest.fixture
def alarm():
    """A hang fails the test instead of stalling the suite."""
    def on_alarm(*_):
        raise TimeoutError("hung")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _cfg(tmp_path, train: str, **data):
    from mmtune.config import load_config

    path = tmp_path / "run.yaml"
    extra = "".join(f", {k}: {v}" for k, v in data.items())
    path.write_text(f"output_dir: {tmp_path / 'out'}\nmodel: {{name: tiny/qwen2-vl}}\n"
                    f"data: {{train: '{train}', on_bad_record: skip{extra}}}\ntrain: {{device: cpu}}\n")
    return path, load_config(path, [])


def test_a_named_pipe_as_the_data_file_is_refused_not_waited_on(tmp_path, alarm):
    from mmtune.data.sources import load_records

    fifo = tmp_path / "train.jsonl"
    os.mkfifo(fifo)  # nothing ever writes it: opening it to read blocked forever
    _, cfg = _cfg(tmp_path, str(fifo))
    with pytest.raises(DataError) as e:
        load_records(str(fifo), cfg.data)
    assert "not a regular file" in e.value.what and e.value.where == str(fifo) and "data.train" in e.value.fix


def test_doctor_reports_a_data_path_that_exists_but_cannot_be_read(tmp_path, alarm):
    """A folder without the split (or a pipe) passed the doctor with 0 errors: the data checks were 'not run,
    see MM026' and MM026 only looks for paths that do not exist."""
    from mmtune.doctor.runner import run_doctor

    folder = tmp_path / "data.jsonl"
    folder.mkdir()
    path, _ = _cfg(tmp_path, str(folder))
    rep = run_doctor(path, [], None, only=["MM014", "MM026"])
    [f] = rep.errors
    assert "has no 'train' split" in f.message and f.where == str(folder) and f.fix
    missing, _ = _cfg(tmp_path, str(tmp_path / "nope.jsonl"))
    assert [f.code for f in run_doctor(missing, [], None, only=["MM014", "MM026"]).errors] == ["MM026"]  # said once


def test_a_named_pipe_is_refused_under_data_streaming_too(tmp_path, alarm):
    from mmtune.data.rows import stream_rows

    fifo = tmp_path / "train.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="not a regular file"):
        stream_rows(str(fifo), "train")


def test_a_wav_cut_short_is_corrupt_media_for_the_measure_and_the_decoder(tmp_path):
    """libsndfile reads a WAV whose data chunk declares more than the file holds without a word: the clip
    trained at 30 % of its length, counted as good."""
    import numpy as np
    import soundfile as sf

    from mmtune.data.formats import BadRecord
    from mmtune.data.media import load_audio
    from mmtune.data.media_probe import audio_seconds

    whole, cut = tmp_path / "whole.wav", tmp_path / "cut.wav"
    sf.write(whole, np.zeros(16000, dtype=np.float32), 16000)
    cut.write_bytes(whole.read_bytes()[:9600])
    assert audio_seconds({"type": "audio", "path": str(whole)}) == 1.0
    assert load_audio({"type": "audio", "path": str(whole)}, "d.jsonl:1").shape == (16000,)
    with pytest.raises(DataError, match="corrupt media .the WAV file is cut short: it declares 1 s"):
        audio_seconds({"type": "audio", "path": str(cut)})
    with pytest.raises(BadRecord) as e:
        load_audio({"type": "audio", "path": str(cut)}, "d.jsonl:2")
    assert e.value.reason == "corrupt media" and e.value.where == "d.jsonl:2" and "download" in e.value.fix
