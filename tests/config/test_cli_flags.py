"""`mmtune train CONFIG --learning_rate 2e-4` (an HF script's habit): each flag mmtune does not have is named with
the key=value that says it, instead of click's bare "No such option"; nothing runs (config/loader.py)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mmtune.cli import app
from mmtune.config.loader import split_overrides
from mmtune.errors import ConfigError


def _said(args):
    with pytest.raises(ConfigError) as e:
        split_overrides(args)
    return " ".join(str(e.value).split()), " ".join(e.value.fix.split())


def test_other_tools_flags_are_named_in_our_keys():
    what, fix = _said(["train.max_steps=5", "--learning_rate", "2e-4", "--num_train_epochs=3", "--train.warmup_steps",
                       "10", "--max-lenght", "512"])
    assert "4 command-line option(s)" in what
    assert "--learning_rate 2e-4 -> train.lr=2e-4" in what and "--num_train_epochs=3 -> train.epochs=3" in what
    assert "--train.warmup_steps 10 -> train.warmup_steps=10" in what and "--max-lenght 512 -> data.max_length=512" in what
    assert fix.startswith("write settings as dotted key=value") and "train.lr=2e-4 train.epochs=3" in fix


def test_a_flag_that_is_nothing_says_so():
    what, _ = _said(["--zzqqx"])
    assert "--zzqqx -> (no such option or config key: mmtune train --help)" in what


@pytest.mark.parametrize("command", ["train", "eval"])
def test_the_commands_answer_with_the_override_and_run_nothing(tmp_path, command):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"output_dir: {tmp_path / 'out'}\nmodel: {{name: tiny/qwen2}}\ndata: {{train: synthetic:counting}}\n")
    r = CliRunner().invoke(app, [command, str(cfg), "--learning_rate", "2e-4"])
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "Traceback" not in r.output and "No such option" not in out, r.output
    assert "--learning_rate 2e-4 -> train.lr=2e-4" in out
    assert not (tmp_path / "out").exists()
