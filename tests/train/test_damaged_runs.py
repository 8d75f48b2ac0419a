"""A run folder damaged after training (a truncated weights file, a cut summary.json, a dangling `best`,
garbage lines in the logs) and bad `mmtune chat` attachments: each an error or warning saying what,
where and the fix -- never a traceback, never a damaged checkpoint read as the trained model."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mmtune.build import build_run
from mmtune.cli import app
from mmtune.config import load_config
from mmtune.train.loop import train


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny LoRA run with checkpoints at steps 1 and 2 (module-scoped: each test damages a copy)."""
    import yaml

    from tests.train.conftest import make_dataset

    root = tmp_path_factory.mktemp("damaged")
    data = make_dataset(root / "data", 6)
    cfg_path = root / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "output_dir": str(root / "run"), "model": {"name": "tiny/qwen2-vl", "gradient_checkpointing": False},
        "data": {"train": str(data), "eval": str(data), "max_length": 256, "eval_max_samples": 2},
        "adapter": {"method": "lora", "r": 4, "dropout": 0.0},
        "train": {"max_steps": 2, "micro_batch_size": 2, "grad_accum": 1, "precision": "fp32", "device": "cpu",
                  "warmup_steps": 0, "save_every": 1, "keep_last": 2},
        "eval": {"every": None, "metrics": ["exact_match"], "max_new_tokens": 2, "batch_size": 2},
        "logging": {"tensorboard": False}}))
    train(build_run(load_config(cfg_path, [])))
    return root / "run", data.parent


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(trained[0], dst, symlinks=True)
    return dst


def _cli(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert not r.exception or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, " ".join(r.output.split())


def test_a_truncated_checkpoint_is_never_exported_evaluated_or_chatted_with(run_copy, tmp_path):
    weights = run_copy / "checkpoint-2" / "trainable.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    (run_copy / "best").unlink()
    for args in (["export", run_copy, "--out", tmp_path / "out"], ["chat", run_copy, "How many?"]):
        code, out = _cli(*args)
        assert code == 2, out
        assert "checkpoint-2 is damaged: trainable.safetensors has 100 bytes" in out, out
        assert "use an intact one:" in out and "checkpoint-1" in out, out
    assert not (tmp_path / "out").exists()
    code, out = _cli("export", run_copy / "checkpoint-1", "--out", tmp_path / "out")  # the intact one still works
    assert code == 0 and (tmp_path / "out" / "adapter_config.json").is_file(), out


def test_a_dangling_best_link_names_the_checkpoint_to_use(run_copy, tmp_path):
    target = os.readlink(run_copy / "best")
    shutil.rmtree(run_copy / target)
    code, out = _cli("export", run_copy, "--out", tmp_path / "out")
    assert code == 2 and f"points at {target}, which is gone" in out and "give a checkpoint explicitly" in out, out


def test_report_draws_a_run_with_a_cut_summary_and_garbage_log_lines(run_copy):
    (run_copy / "summary.json").write_text('{"eval": ')
    with open(run_copy / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 3, "loss"\n\xff\xfe not utf-8\n7\n')
    code, out = _cli("report", run_copy)
    assert code == 0, out
    assert "summary.json is not valid JSON" in out and "the report is drawn without it" in out
    assert "3 line(s) of metrics.jsonl are not valid JSON objects (left out)" in out
    assert (run_copy / "report.html").is_file()


def test_chat_attachments_are_checked_up_front_and_named(trained, tmp_path):
    run, media = trained
    (tmp_path / "notes.txt").write_text("not an image")
    cases = {
        ("--image", media): ("media path is a folder", "a folder is read as video frames"),
        ("--image", tmp_path / "notes.txt"): ("image cannot be decoded", "give a readable image file"),
        ("--image", tmp_path / "missing.png"): ("image file not found", "check the path"),
        ("--audio", tmp_path / "notes.txt"): ("this model does not take audio", "it takes: image"),
    }
    for (flag, path), (what, fix) in cases.items():
        code, out = _cli("chat", run, "How many?", flag, path)
        assert code == 2 and what in out and f"where: {flag} {path}" in out and fix in out, out


def test_a_bad_attachment_in_a_conversation_is_said_and_the_conversation_goes_on(trained, tmp_path):
    run, media = trained
    (tmp_path / "notes.txt").write_text("not an image")
    r = CliRunner().invoke(app, ["chat", str(run)],
                           input=f"/image {tmp_path / 'notes.txt'}\n/image {media / 'img0.png'}\nHow many?\n")
    out = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert "error: image cannot be decoded" in out and "(not attached; give a readable image file)" in out
