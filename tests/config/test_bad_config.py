"""A config file or override that is wrong in one way is one error naming what, where and the fix --
through the loader, `mmtune data inspect` and the doctor alike; never a traceback, never a silent choice."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mmtune.cli import app
from mmtune.config import load_config
from mmtune.errors import ConfigError
from tests.data.bad_files import CONFIGS

# name -> (words of the error, words of where, words of the fix)
EXPECTED = {
    "duplicate key": ("key 'lr' is given twice in the same section (line 7 and line 9)", ":7 and ", "keep one 'lr'"),
    "duplicate section": ("key 'data' is given twice in the same section (line 4 and line 8)", ":4 and ",
                          "merge the two"),
    "bad override value": ("train.lr: Input should be a valid number", "", ""),
    "bad override int": ("train.max_steps: Input should be a valid integer", "", ""),
    "infinite override": ("train.lr: Input should be a finite number", "", ""),
    "override without =": ("override 'train.lr' is not key=value", "command line", "dotted.key=value"),
    "top level is a list": ("must hold a mapping of sections (model:, data:, ...), not a list", ".yaml",
                            "write the config as sections"),
    "tab indentation": ("is not valid YAML", ".yaml:2", "fix the YAML syntax"),
}


def _write(tmp_path, name):
    text, overrides = CONFIGS[name]
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return path, overrides


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_bad_config_is_one_error_with_what_where_and_fix(tmp_path, name):
    path, overrides = _write(tmp_path, name)
    what, where, fix = EXPECTED[name]
    with pytest.raises(ConfigError) as e:
        load_config(path, overrides)
    assert what in str(e.value), str(e.value)
    assert where in (e.value.where or "") and fix in (e.value.fix or "" if fix else ""), (e.value.where, e.value.fix)
    if "override" in name and "=" in CONFIGS[name][1][0]:  # the problem names the command line as its source
        assert "[command line: " in str(e.value)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_bad_config_through_the_commands_is_an_error_not_a_traceback(tmp_path, name):
    path, overrides = _write(tmp_path, name)
    what = EXPECTED[name][0]
    r = CliRunner().invoke(app, ["data", "inspect", str(path), *overrides])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert what in " ".join(r.output.split()), r.output
    r = CliRunner().invoke(app, ["doctor", str(path), *overrides, "--fast", "--json"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert '"MM019"' in r.output and what.split(" (")[0] in r.output


def test_yaml_merge_keys_are_not_duplicates(tmp_path):
    """`<<: *defaults` merges on purpose; only a key written twice is refused."""
    path = tmp_path / "cfg.yaml"
    path.write_text("base: &b {max_steps: 5, lr: 1.0e-4}\noutput_dir: out\nmodel: {name: tiny/qwen2-vl}\n"
                    "data: {train: synthetic:counting}\ntrain:\n  <<: *b\n  lr: 3.0e-4\n")
    with pytest.raises(ConfigError) as e:  # `base` is no key of ours: the usual unknown-key error, not a duplicate
        load_config(path, [])
    assert "unknown key 'base'" in str(e.value) and "twice" not in str(e.value)


@pytest.mark.parametrize("key", ["model.name", "data.train", "data.eval", "data.media_root", "output_dir"])
@pytest.mark.parametrize("value", ["runs/" + "x" * 300, "data/a\x00b.jsonl"])
def test_a_path_no_file_system_can_hold_is_refused_naming_its_key(tmp_path, key, value):
    """A 300-byte file name made `Path.is_dir()` raise "File name too long" from deep in the resolve (Python 3.11);
    a NUL byte makes every lookup raise. Both are refused when the config is read, with the key."""
    path = tmp_path / "cfg.yaml"
    path.write_text("model: {name: tiny/qwen2-vl}\ndata: {train: 'synthetic:counting'}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path, [f"{key}={value}"])
    assert key in str(e.value) and ("255 bytes" in str(e.value) or "NUL byte" in str(e.value))


def test_a_mixture_source_path_too_long_is_refused(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("model: {name: tiny/qwen2-vl}\ndata:\n  train:\n    - {path: 'synthetic:counting'}\n"
                    f"    - {{path: '{'y' * 256}.jsonl'}}\n")
    with pytest.raises(ConfigError, match=r"1 problem.*\n- data.train.1.path: has a name of 262 bytes"):
        load_config(path, [])


@pytest.mark.parametrize("train,key,words", [
    ("[{path: a.jsonl, weight: -1}, {path: b.jsonl}]", "data.train.0.weight", "greater than 0"),
    ("{a: 1}", "data.train", "a valid string or a valid list"),
])
def test_a_key_of_several_types_gives_one_problem_under_its_own_key(tmp_path, train, key, words):
    """data.train takes a path or a list of sources: pydantic reports every branch (a bad mixture weight was four
    problems, two of them under data.eval, which the mixture derives, and the key read
    'data.train.list[function-after[_weight_or_samples(), SourceConfig]].0.weight')."""
    path = tmp_path / "cfg.yaml"
    path.write_text(f"model: {{name: tiny/qwen2-vl}}\ndata: {{train: {train}}}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path, [])
    assert [p["key"] for p in e.value.problems] == [key]
    assert words in e.value.problems[0]["message"] and "[" not in e.value.problems[0]["key"]


@pytest.mark.parametrize("key", ["train.micro_batch_size", "train.seed", "data.max_length", "eval.batch_size"])
def test_an_integer_past_int64_is_refused_naming_its_key(tmp_path, key):
    """`mmtune plan` with train.micro_batch_size=99999999999999999999999 raised OverflowError ("cannot fit 'int' into
    an index-sized integer") from the planner's batch; torch's seeds and tensors stop at int64 too."""
    path = tmp_path / "cfg.yaml"
    path.write_text("model: {name: tiny/qwen2-vl}\ndata: {train: 'synthetic:counting'}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path, [f"{key}=99999999999999999999999"])
    assert [p["key"] for p in e.value.problems] == [key] and "64-bit" in str(e.value)
    load_config(path, [f"{key}=64"])  # an ordinary value still loads
