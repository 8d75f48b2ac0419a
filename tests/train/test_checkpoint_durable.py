"""Checkpoints a crash or a bad disk cannot defeat: manifest verified on load, fallback to the newest
checkpoint that verifies, leftovers of failed saves removed, a full disk refused before writing."""

import errno
import json
import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.errors import MMTuneError
from mmtune.train import checkpoint as C
from mmtune.train.durable import verify_manifest, write_manifest
from mmtune.train.loop import train


def _fake_checkpoint(out: Path, step: int) -> Path:
    d = out / f"checkpoint-{step}"
    (d / "adapter").mkdir(parents=True)
    (d / "state.pt").write_bytes(bytes(range(256)) * 40)
    (d / "trainable.safetensors").write_bytes(b"w" * 5000)
    (d / "adapter" / "adapter_model.safetensors").write_bytes(b"a" * 3000)
    write_manifest(d)
    return d


@pytest.mark.parametrize("damage, said", [
    (lambda d: (d / "state.pt").write_bytes(b""), "zero-byte"),
    (lambda d: (d / "trainable.safetensors").write_bytes(b"w" * 100), "100 bytes, 5000 were written"),
    (lambda d: (d / "adapter" / "adapter_model.safetensors").write_bytes(b"b" * 3000), "checksum"),
    (lambda d: (d / "state.pt").unlink(), "state.pt is missing"),
    (lambda d: (d / "adapter" / "adapter_model.safetensors").unlink(), "missing"),
    (lambda d: (d / "manifest.json").write_text("{tru"), "unreadable"),
])
def test_damaged_latest_falls_back_to_newest_that_verifies(tmp_path, damage, said):
    _fake_checkpoint(tmp_path, 2)
    good = _fake_checkpoint(tmp_path, 4)
    bad = _fake_checkpoint(tmp_path, 6)
    assert C.newest_valid_checkpoint(tmp_path) == (bad, [])
    damage(bad)
    ckpt, passed = C.newest_valid_checkpoint(tmp_path)
    assert ckpt == good
    if said is not None:
        assert len(passed) == 1 and passed[0].startswith("checkpoint-6: ") and said in passed[0]


def test_checkpoint_without_manifest_is_taken_as_is(tmp_path):
    d = _fake_checkpoint(tmp_path, 3)
    (d / "manifest.json").unlink()  # written before manifests existed
    assert verify_manifest(d) is None
    assert C.newest_valid_checkpoint(tmp_path) == (d, [])


def test_leftover_tmp_folders_are_removed(tmp_path):
    (tmp_path / ".tmp-checkpoint-7" / "adapter").mkdir(parents=True)
    (tmp_path / ".tmp-checkpoint-7" / "state.pt").write_bytes(b"x" * 10)
    keep = _fake_checkpoint(tmp_path, 5)
    assert C.clean_leftovers(tmp_path) == [".tmp-checkpoint-7"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [keep.name]


def test_real_save_writes_a_manifest_and_resume_falls_back(tiny_vl_config, capsys):
    """A run's checkpoints verify; damaging the newest makes the next run resume from the one before,
    say why, and finish with exactly the weights an undamaged run has."""
    cfg = load_config(tiny_vl_config(train={"max_steps": 4, "save_every": 2, "grad_accum": 1}), [])
    out = Path(cfg.output_dir)
    train(build_run(cfg))
    reference = (out / "checkpoint-4" / "trainable.safetensors").read_bytes()
    for step in (2, 4):
        manifest = json.loads((out / f"checkpoint-{step}" / "manifest.json").read_text())
        assert {"trainable.safetensors", "state.json", "state.safetensors", "meta.json", "config.json",
                "rng/rank-0.json", "rng/rank-0.safetensors"} <= set(manifest["files"])
        assert not [f for f in manifest["files"] if f.endswith((".pt", ".bin", ".pkl"))]  # no pickle anywhere
        assert verify_manifest(out / f"checkpoint-{step}") is None
    # A crash left the latest checkpoint with a truncated weight file, and a half-written save behind.
    w = out / "checkpoint-4" / "trainable.safetensors"
    w.write_bytes(w.read_bytes()[:1000])
    (out / ".tmp-checkpoint-5").mkdir()
    cfg6 = load_config(tiny_vl_config(train={"max_steps": 4, "save_every": 2, "grad_accum": 1}), [])
    capsys.readouterr()
    train(build_run(cfg6))
    said = capsys.readouterr().out
    assert "checkpoint-4: trainable.safetensors has 1000 bytes" in said
    assert "resuming from checkpoint-2" in said and ".tmp-checkpoint-5" in said
    assert not (out / ".tmp-checkpoint-5").exists()
    assert (out / "checkpoint-4" / "trainable.safetensors").read_bytes() == reference


Usage = namedtuple("Usage", "total used free")


def _save_every_step_run(tiny_vl_config):
    return build_run(load_config(tiny_vl_config(train={"max_steps": 2, "save_every": 1}), []))


def _fails_leaving_no_checkpoint(run, error: str, fix: str) -> None:
    """train(run) stops with `error`, `fix` in its fix, and leaves no checkpoint nor temporary folder."""
    with pytest.raises(MMTuneError, match=error) as e:
        train(run)
    assert fix in e.value.fix
    out = Path(run.cfg.output_dir)
    assert not list(out.glob("checkpoint-*")) and not list(out.glob(".tmp-*"))


def test_low_disk_is_refused_before_writing(tiny_vl_config, monkeypatch):
    run = _save_every_step_run(tiny_vl_config)
    need = C.estimate_checkpoint_bytes(run)
    trainable = sum(p.numel() * 4 for p in run.unwrapped_model().parameters() if p.requires_grad)
    assert need == 4 * trainable  # nothing saved yet: estimated from the LoRA state
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**12, 10**12 - need + 1, need - 1))
    _fails_leaving_no_checkpoint(run, "not enough free disk for a checkpoint", "resumes")


def test_disk_full_during_save_is_a_clear_error_and_leaves_nothing(tiny_vl_config, monkeypatch):
    """ENOSPC in the middle of writing a checkpoint (simulated at the file write, the disk being real)."""
    run = _save_every_step_run(tiny_vl_config)
    import safetensors.torch

    def full_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", a[1] if len(a) > 1 else None)

    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)
    _fails_leaving_no_checkpoint(run, "saving checkpoint-1 failed: the disk is full", "resumes from the last good checkpoint")


def test_disk_full_while_logging_is_a_clear_error(tiny_vl_config, monkeypatch):
    from mmtune.train.logging_sinks import Sinks

    def full_disk(self, step, values, kind="train"):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Sinks, "log", full_disk)
    cfg = load_config(tiny_vl_config(train={"max_steps": 1}), [])
    with pytest.raises(MMTuneError, match="the disk is full") as e:
        train(build_run(cfg))
    assert "run the same command again" in e.value.fix
