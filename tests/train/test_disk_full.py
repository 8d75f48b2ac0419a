"""A disk that fills up: at every single write of a checkpoint save (simulated: the k-th write raises
ENOSPC, for every k), on a real small tmpfs where this machine allows mounting one, and when the run
(re)starts on a full disk. Each ends in a clear message with the space needed and free; the earlier
checkpoints stay intact, no `.tmp-checkpoint-N` is left, and the lock is never left empty."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.errors import MMTuneError
from mmtune.train import checkpoint as C
from mmtune.train import lock
from mmtune.train.durable import fmt_bytes, verify_manifest
from mmtune.train.loop import train


class FullAfter:
    """Counts the writes Python makes (files opened for writing, folders made, safetensors files) and
    makes write number `fail_at` fail as a full disk does: OSError(ENOSPC) from Python's own calls, and
    the text a Rust writer reports (safetensors: SafetensorError "...No space left on device (os error 28)")."""

    def __init__(self, monkeypatch, fail_at: int | None):
        import safetensors
        import safetensors.torch

        self.count, self.fail_at, self.where = 0, fail_at, []
        real_open, real_mkdir, real_save = builtins.open, os.mkdir, safetensors.torch.save_file

        def hit(what, rust=False):
            self.count += 1
            self.where.append(str(what))
            if self.count == self.fail_at:
                if rust:
                    raise safetensors.SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
                                                      'message: "No space left on device" })')
                raise OSError(errno.ENOSPC, "No space left on device", str(what))

        def open_(file, mode="r", *a, **k):
            if any(c in mode for c in "wax+"):
                hit(file)
            return real_open(file, mode, *a, **k)

        def mkdir(path, *a, **k):
            if not os.path.isdir(path):  # an existing folder is EEXIST, never a full disk
                hit(path)
            return real_mkdir(path, *a, **k)

        def save_file(tensors, filename, *a, **k):
            hit(filename, rust=True)
            return real_save(tensors, filename, *a, **k)

        for target, name, fn in ((builtins, "open", open_), (io, "open", open_), (os, "mkdir", mkdir),
                                 (safetensors.torch, "save_file", save_file)):
            monkeypatch.setattr(target, name, fn)


def _cfg(tiny_vl_config, **train_kw):
    return load_config(tiny_vl_config(train={"max_steps": 3, "save_every": 1, "grad_accum": 1, **train_kw}), [])


def _snapshot(out: Path) -> dict:
    return {p.name: (p / "manifest.json").read_bytes() for p in C.list_checkpoints(out)}


def test_enospc_at_every_write_of_a_save_keeps_the_earlier_checkpoints(tiny_vl_config, monkeypatch):
    cfg = _cfg(tiny_vl_config)
    out = Path(cfg.output_dir)
    run = build_run(cfg)
    assert train(run, stop_after=2) is None  # checkpoints 1 and 2 on disk; the run's state is live
    before = _snapshot(out)
    state = {"step": 3, "position": {"epoch": 0, "index": 6}, "best": {"value": None, "step": None, "path": None},
             "accepted_changes": []}
    with monkeypatch.context() as m:
        counter = FullAfter(m, fail_at=None)
        C.save_checkpoint(run, 3, state)
    writes = counter.count
    assert writes >= 15, counter.where  # folders, state, RNG, weights, adapter, processor, meta, config, manifest
    shutil.rmtree(out / "checkpoint-3")
    for k in range(1, writes + 1):
        with monkeypatch.context() as m:
            FullAfter(m, fail_at=k)
            with pytest.raises(MMTuneError) as e:
                C.save_checkpoint(run, 3, state)
        said = e.value.what
        assert "saving checkpoint-3 failed: the disk is full" in said, (k, said)
        assert "this save needs about" in said and "free now" in said and "0.00 GiB" not in said, said
        assert "earlier checkpoints are intact" in said and "resumes from the last good checkpoint" in e.value.fix
        assert sorted(p.name for p in out.iterdir() if "checkpoint" in p.name) == ["checkpoint-1", "checkpoint-2"], k
        assert _snapshot(out) == before and all(verify_manifest(c) is None for c in C.list_checkpoints(out))
    # The same command again resumes from checkpoint-2 and finishes.
    summary = train(build_run(_cfg(tiny_vl_config)))
    assert summary["steps"] == 3 and verify_manifest(out / "checkpoint-3") is None


def test_resaving_a_step_replaces_it_only_once_the_new_one_is_complete(tiny_vl_config, monkeypatch):
    """A checkpoint of the same step saved again (a signal right after a resume): a full disk during the
    new save leaves the old one in place; a kill between the two renames is repaired on the next start."""
    cfg = _cfg(tiny_vl_config, max_steps=1)
    out = Path(cfg.output_dir)
    run = build_run(cfg)
    train(run)
    old = (out / "checkpoint-1" / "manifest.json").read_bytes()
    state = {"step": 1, "position": {"epoch": 0, "index": 2}, "best": {"value": None, "step": None, "path": None}}
    with monkeypatch.context() as m:
        FullAfter(m, fail_at=5)
        with pytest.raises(MMTuneError, match="disk is full"):
            C.save_checkpoint(run, 1, state)
    assert (out / "checkpoint-1" / "manifest.json").read_bytes() == old
    (out / "checkpoint-1").rename(out / f"{C.TMP_PREFIX}1{C.REPLACED}")  # as a kill between the renames leaves it
    assert C.clean_leftovers(out) == [] and verify_manifest(out / "checkpoint-1") is None


def test_low_disk_figures_are_in_a_unit_that_shows_them(tiny_vl_config, monkeypatch):
    from collections import namedtuple

    assert [fmt_bytes(n) for n in (0, 512, 1536, 3 * 2**20 + 2**19, 25 * 2**30, 300 * 2**30)] == \
        ["0 B", "512 B", "1.5 KiB", "3.5 MiB", "25 GiB", "300 GiB"]
    run = build_run(_cfg(tiny_vl_config))
    need = C.estimate_checkpoint_bytes(run)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 3 * 2**20, 3 * 2**20 if need > 3 * 2**20
                                                              else need // 2))
    with pytest.raises(MMTuneError, match="not enough free disk") as e:
        C.check_disk(run)
    assert "0.00 GiB" not in e.value.what and fmt_bytes(need) in e.value.what


# ---- the lock ---------------------------------------------------------------------------------------

def test_a_full_disk_at_start_is_a_clear_error_and_leaves_no_lock(tmp_path, monkeypatch):
    real_dump = json.dump

    def full(obj, f, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(json, "dump", full)
    with pytest.raises(MMTuneError, match="disk of .* is full") as e, lock.output_dir_lock(tmp_path):
        pass
    monkeypatch.setattr(json, "dump", real_dump)
    assert "free" in e.value.what and "run the same command again" in e.value.fix
    assert list(tmp_path.iterdir()) == []  # neither the lock nor its temporary file
    with lock.output_dir_lock(tmp_path):  # and the next start, with space again, takes it
        assert json.loads((tmp_path / lock.LOCK_NAME).read_text())["pid"] == os.getpid()


def test_without_hard_links_the_lock_is_still_never_left_empty(tmp_path, monkeypatch):
    def no_links(*a, **k):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    real_fsync = os.fsync
    calls = []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 2:  # the second write: the lock itself, after its temporary file
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(MMTuneError, match="is full"), lock.output_dir_lock(tmp_path):
        pass
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(os, "fsync", real_fsync)
    with lock.output_dir_lock(tmp_path):
        assert json.loads((tmp_path / lock.LOCK_NAME).read_text())["pid"] == os.getpid()


def test_an_empty_lock_left_by_an_earlier_version_is_taken_over(tmp_path, capsys):
    (tmp_path / lock.LOCK_NAME).write_bytes(b"")
    (tmp_path / f"{lock.LOCK_NAME}.999999999.1.tmp").write_text("{}")  # a temporary of a process long gone
    with lock.output_dir_lock(tmp_path):
        assert json.loads((tmp_path / lock.LOCK_NAME).read_text())["pid"] == os.getpid()
    assert "removed an empty lock file" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


# ---- a real full disk: a small tmpfs ------------------------------------------------------------------

@pytest.fixture
def small_tmpfs(tmp_path):
    """A 48 MiB tmpfs, where this machine lets the tests mount one (root, and mount permitted)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)], capture_output=True, text=True,
                       check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(folder: Path, leave: int) -> Path:
    """Fill the disk of `folder` until `leave` bytes are free."""
    filler = folder / "filler"
    free = shutil.disk_usage(folder).free
    with open(filler, "wb") as f:
        f.truncate(0)
        f.write(b"\0" * max(free - leave, 0))
    return filler


def test_a_real_full_disk_during_a_save_and_at_restart(tiny_vl_config, small_tmpfs, monkeypatch):
    out = small_tmpfs / "run"
    cfg = load_config(tiny_vl_config(output_dir=str(out), train={"max_steps": 1, "save_every": 1}), [])
    train(build_run(cfg))
    one = C.folder_bytes(out / "checkpoint-1")
    before = _snapshot(out)
    # Half a checkpoint of room, and the check before the save passed (as when another process fills the
    # disk between that check and the writes): the save itself meets the full disk, in whichever writer.
    monkeypatch.setattr(C, "check_disk", lambda run: None)
    filler = _fill(small_tmpfs, one // 2)
    more = load_config(tiny_vl_config(output_dir=str(out), train={"max_steps": 2, "save_every": 1}),
                       ["train.accept_changes=true"])
    with pytest.raises(MMTuneError) as e:
        train(build_run(more))
    said = e.value.what
    assert "disk is full" in said and "0.00 GiB" not in said, said
    assert _snapshot(out) == before and verify_manifest(out / "checkpoint-1") is None
    assert not list(out.glob(".tmp-*")) and not (out / lock.LOCK_NAME).exists()
    # A restart on a disk with no byte left: a clear message, and no lock left behind (empty or not).
    filler.unlink()
    monkeypatch.undo()
    _fill(small_tmpfs, 0)
    with pytest.raises(MMTuneError, match="is full") as e:
        train(build_run(more))
    assert not (out / lock.LOCK_NAME).exists() and not list(out.glob(f"{lock.LOCK_NAME}*"))
    # Space again: the same command resumes from checkpoint-1 and finishes.
    (small_tmpfs / "filler").unlink()
    assert train(build_run(more))["steps"] == 2
