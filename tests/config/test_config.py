from pathlib import Path

import pytest

from mmtune.config import load_config
from mmtune.config.loader import available_profiles
from mmtune.errors import ConfigError

BASE = "output_dir: runs/x\nmodel: {name: tiny/qwen2-vl}\n"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_stable_keys_exist_with_their_names(tmp_path):
    cfg = load_config(write(tmp_path, BASE), ["adapter.method=qlora", "adapter.r=8", "adapter.target_modules=[q_proj]",
                                               "data.train=a.jsonl", "data.eval=b.jsonl", "train.max_steps=7",
                                               "train.precision=fp16", "model.name=tiny/qwen2"])
    assert (cfg.output_dir, cfg.model.name, cfg.adapter.method, cfg.adapter.r) == ("runs/x", "tiny/qwen2", "qlora", 8)
    assert cfg.adapter.target_modules == ["q_proj"]
    assert (cfg.data.train, cfg.data.eval, cfg.train.max_steps, cfg.train.precision) == ("a.jsonl", "b.jsonl", 7, "fp16")


def test_typo_in_file_and_override_both_reported_with_did_you_mean(tmp_path):
    p = write(tmp_path, BASE + "train: {max_stesp: 3}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, ["adapter.rr=3", "train.lr=abc"])
    probs = {x["key"]: x for x in e.value.problems}
    assert set(probs) == {"train.max_stesp", "adapter.rr", "train.lr"}
    assert "train.max_steps" in probs["train.max_stesp"]["fix"]
    assert str(p) in probs["train.max_stesp"]["where"]
    assert "'adapter.r'" in probs["adapter.rr"]["fix"]
    assert "command line" in probs["adapter.rr"]["where"]


def test_unknown_section_suggests_the_section(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, BASE + "adpter: {r: 4}\n"), [])
    assert "adapter" in e.value.problems[0]["fix"]


def test_profile_is_under_user_keys_and_overrides_win(tmp_path):
    assert {"t4_qlora", "a100_bf16", "cloud_zero2"} <= set(available_profiles())
    p = write(tmp_path, BASE + "train: {grad_accum: 4}\n")
    cfg = load_config(p, ["profile=t4_qlora", "adapter.r=4"])
    assert cfg.adapter.method == "qlora" and cfg.train.precision == "fp16"  # from the profile
    assert cfg.train.grad_accum == 4  # the user's file beats the profile
    assert cfg.adapter.r == 4  # the command line beats both


def test_unknown_profile_lists_known(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, BASE), ["profile=t4_qlroa"])
    assert "t4_qlora" in e.value.fix


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", [])
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, "model: {name: [\n"), [])
    assert "c.yaml" in e.value.where


def test_override_without_equals_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="key=value"):
        load_config(write(tmp_path, BASE), ["train.max_steps"])


def test_unknown_component_rejected(tmp_path):
    with pytest.raises(ConfigError, match="projecter"):
        load_config(write(tmp_path, BASE), ["adapter.train_components=[projecter]"])


def test_config_reference_is_up_to_date():
    from mmtune.config.reference import render

    doc = Path(__file__).resolve().parents[2] / "docs" / "config.md"
    assert doc.read_text() == render(), "run: python -m mmtune.config.reference > docs/config.md"


def test_markdown_tables_in_the_docs_have_as_many_cells_as_their_header():
    """A bare `|` inside a cell (`str | None`, `messages | vqa`) splits it and shifts the row: each table row of
    README.md and docs/*.md has its header's cell count (escaped `\\|` does not split)."""
    import re

    root = Path(__file__).resolve().parents[2]
    bad = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        width, fenced = None, False
        for i, line in enumerate(doc.read_text().splitlines(), 1):
            fenced ^= line.startswith("```")
            if fenced or not line.startswith("|"):
                width = None
                continue
            n = len(re.split(r"(?<!\\)\|", line.strip())) - 2
            width = n if width is None else width
            if n != width:
                bad.append(f"{doc.name}:{i}: {n} cells, header {width}")
    assert not bad, bad


def test_yaml_examples_in_the_docs_are_valid_config():
    """Every ```yaml block of README.md and docs/*.md validates against the schema (under a minimal base):
    a renamed or removed key fails here before a user copies the example."""
    import re

    import yaml

    from mmtune.config.loader import deep_merge, validate

    root = Path(__file__).resolve().parents[2]
    base = {"output_dir": "out", "model": {"name": "tiny/qwen2-vl"}, "data": {"train": "synthetic:counting"}}
    blocks = 0
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for m in re.finditer(r"```yaml\n(.*?)```", doc.read_text(), re.S):
            validate(deep_merge(base, yaml.safe_load(m.group(1))), path=f"{doc.name} (a yaml example)")
            blocks += 1
    assert blocks >= 4
