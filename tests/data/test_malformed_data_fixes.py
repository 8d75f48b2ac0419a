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
