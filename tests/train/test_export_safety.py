"""`mmtune export --out DIR` never deletes what is not its own: not the run, not a user's folder.

It once removed an existing --out before writing (`export runs/x --out runs/x` wiped the run). Now an
existing non-empty --out is replaced only when it is an earlier export of the same run, and the new
export is complete before the old one goes.
"""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mmtune.build import build_run
from mmtune.cli import app
from mmtune.config import load_config
from mmtune.train.loop import train


@pytest.fixture
def run_dir(tiny_vl_config) -> Path:
    cfg = load_config(tiny_vl_config(train={"max_steps": 1, "grad_accum": 1}), [])
    train(build_run(cfg))
    return Path(cfg.output_dir)


def _export(*args):
    return CliRunner().invoke(app, ["export", *map(str, args)])


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_out_never_overwrites_the_run_or_a_users_folder(run_dir, tmp_path):
    before = _tree(run_dir)
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    cases = {
        run_dir: "is the run folder or holds it",
        run_dir / "checkpoint-1": "is the run folder or holds it",
        run_dir.parent: "is the run folder or holds it",
        run_dir / "exports": "lies inside the run folder",
        user: "holds files that are not an export of this run",
    }
    for out, message in cases.items():
        r = _export(run_dir, "--out", out)
        assert r.exit_code == 2, (out, r.output)
        assert message in r.output and "fix:" in r.output, r.output
    assert _tree(run_dir) == before
    assert (user / "notes.txt").read_text() == "keep me" and _tree(user) == {"notes.txt"}


def test_out_is_written_then_replaced_only_by_an_export_of_the_same_run(run_dir, tmp_path, tiny_vl_config):
    out = tmp_path / "exported"
    assert _export(run_dir, "--out", out).exit_code == 0
    assert (out / "adapter_config.json").is_file() and (out / ".mmtune-export.json").is_file()
    (out / "stale.txt").write_text("from the earlier export")
    r = _export(run_dir, "--out", out)  # the same run again: replaced
    assert r.exit_code == 0, r.output
    assert (out / "adapter_config.json").is_file() and not (out / "stale.txt").exists()
    assert [p.name for p in out.parent.iterdir() if "partial" in p.name] == []  # no staging folder left
    # An empty existing folder is fine; the default place is inside the checkpoint.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _export(run_dir, "--out", empty).exit_code == 0 and (empty / "adapter_config.json").is_file()
    assert _export(run_dir).exit_code == 0 and _export(run_dir).exit_code == 0
    assert (run_dir / "checkpoint-1" / "export" / "adapter_config.json").is_file()


def test_an_export_of_another_run_is_not_replaced(run_dir, tmp_path):
    out = tmp_path / "exported"
    assert _export(run_dir, "--out", out).exit_code == 0
    (out / ".mmtune-export.json").write_text('{"run": "/somewhere/else"}')
    r = _export(run_dir, "--out", out)
    assert r.exit_code == 2 and "an mmtune export of another run" in r.output, r.output
    assert (out / "adapter_config.json").is_file()
