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


def test_precedence_defaults_recipe_profile_command_line(tmp_path):
    """built-in defaults < a profile inside the recipe < the recipe < a command-line profile < key=value."""
    from mmtune.config.loader import config_sources

    assert {"t4_qlora", "a100_bf16", "cloud_zero2"} <= set(available_profiles())
    p = write(tmp_path, BASE + "train: {grad_accum: 4, lr: 3.0e-4}\nadapter: {method: lora, r: 64}\n")
    cfg = load_config(p, ["profile=t4_qlora", "adapter.r=4"])
    assert cfg.adapter.method == "qlora" and cfg.train.precision == "fp16"  # the named profile beats the recipe
    assert cfg.train.grad_accum == 16 and cfg.train.optimizer == "adamw_8bit"
    assert cfg.train.lr == 3.0e-4  # the recipe's key the profile does not set stays
    assert cfg.adapter.r == 4  # the command line beats both
    src = config_sources(cfg)
    assert src["adapter.method"] == "profile t4_qlora (command line); was 'lora' from the recipe"
    assert src["adapter.r"].startswith("command line: adapter.r=4; was 16 from profile t4_qlora")
    assert "train.lr" not in src  # from the recipe: no note
    # A profile named inside the recipe supplies defaults its own keys refine.
    inside = write(tmp_path, BASE + "profile: t4_qlora\ntrain: {grad_accum: 4}\n")
    cfg = load_config(inside, [])
    assert cfg.adapter.method == "qlora" and cfg.train.grad_accum == 4
    src = config_sources(cfg)
    assert "named in" in src["adapter.method"] and "train.grad_accum" not in src
    # ... and a command-line profile over it wins again.
    cfg = load_config(inside, ["profile=a100_bf16"])
    assert (cfg.adapter.method, cfg.train.precision, cfg.train.grad_accum) == ("lora", "bf16", 4)


def test_seed004_stage2_with_the_t4_profile_is_a_qlora_run():
    cfg = load_config("recipes/seed004_llava_clip_stage2.yaml", ["profile=t4_qlora"])
    assert (cfg.adapter.method, cfg.train.precision, cfg.train.micro_batch_size, cfg.train.gpu) == \
        ("qlora", "fp16", 1, "t4")
    assert cfg.adapter.train_components == ["projector"]  # what the profile does not say stays the recipe's


def test_the_decisions_say_where_overridden_values_came_from():
    from mmtune.resolve import resolve_run, target_for

    cfg = load_config("recipes/demo_counting.yaml", ["profile=t4_qlora", "train.max_steps=3"])
    lines = resolve_run(cfg, target_for(cfg, "t4", local=False)).summary_lines()
    assert any(line.startswith("config train.max_steps: 3 (command line: train.max_steps=3; was ") for line in lines)
    assert "config train.optimizer: 'adamw_8bit' (profile t4_qlora (command line)" in "\n".join(lines)


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
