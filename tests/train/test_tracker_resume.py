"""A resumed run continues the same W&B run (offline mode: no account, no network): one run id across the kill and
the resume, kept in OUTPUT_DIR/trackers.json, and the steps logged against mmtune's own step, so the steps a resume
does again are logged at their own step instead of being dropped by W&B's ever-growing internal counter."""

from __future__ import annotations

import json

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.train.loop import train

wandb = pytest.importorskip("wandb", reason="logging.wandb needs wandb (the dev extra installs it)")


def _history(run_dir) -> list[dict]:
    """The rows a session logged, read from its offline .wandb file: a LevelDB-style log (a 7-byte ':W&B' header, then
    32 KiB blocks of records, each crc32 / length / kind) of W&B's protobuf Records, as `wandb sync` reads it."""
    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("run-*.wandb")
    raw, rows, part, pos = path.read_bytes(), [], b"", 7
    assert raw[:4] == b":W&B"
    while pos + 7 <= len(raw):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        length, kind = int.from_bytes(raw[pos + 4:pos + 6], "little"), raw[pos + 6]
        part += raw[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(part)
            part = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
    return rows


def test_a_resumed_run_logs_to_the_same_wandb_run_at_its_own_steps(tiny_vl_config, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    path = tiny_vl_config(train={"max_steps": 4, "save_every": 2, "grad_accum": 1},
                          logging={"tensorboard": False, "wandb": True, "project": "mmtune-test"})
    cfg = load_config(path, [])
    out = tmp_path / "run"
    assert train(build_run(cfg), stop_after=3) is None  # killed after step 3: checkpoint-2 is the newest
    first = json.loads((out / "trackers.json").read_text())["wandb"]
    train(build_run(load_config(path, [])))  # resumes at step 3
    assert json.loads((out / "trackers.json").read_text())["wandb"] == first
    runs = sorted((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(r.name.endswith("-" + first) for r in runs)  # one W&B run, two sessions
    killed, resumed = ([r["step"] for r in _history(d) if "train/loss" in r] for d in runs)
    assert killed == [1, 2, 3] and resumed == [3, 4]  # step 3 done again is logged at step 3, not dropped
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["loss"] for r in rows if r["kind"] == "train"}
    assert {r["step"]: r["train/loss"] for r in _history(runs[1]) if "train/loss" in r} == pytest.approx(
        {3: losses[3], 4: losses[4]})


def test_a_fresh_run_in_a_folder_without_a_checkpoint_gets_a_new_wandb_run(tiny_vl_config, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    out = tmp_path / "run"
    out.mkdir()
    (out / "trackers.json").write_text('{"wandb": "someoldrun01"}\n')  # left by a run whose checkpoints were deleted
    path = tiny_vl_config(train={"max_steps": 1, "grad_accum": 1},
                          logging={"tensorboard": False, "wandb": True, "project": "mmtune-test"})
    train(build_run(load_config(path, [])))
    assert json.loads((out / "trackers.json").read_text())["wandb"] != "someoldrun01"


def test_a_tracker_that_cannot_start_is_one_message_naming_its_key():
    """mlflow-skinny's default sqlite store ("Model registry functionality is unavailable"), W&B's no-tty login: the
    tracker's own exception became a traceback after the model had loaded."""
    from mmtune.errors import ConfigError
    from mmtune.train.logging_sinks import _starting

    with pytest.raises(ConfigError) as e, _starting("mlflow"):
        raise RuntimeError("Model registry functionality is unavailable; got unsupported URI 'sqlite:///mlflow.db'")
    assert e.value.where == "logging.mlflow" and "could not start: RuntimeError" in str(e.value)
    assert "MLFLOW_TRACKING_URI" in e.value.fix
