"""Saving is on by default: every shipped recipe and profile checkpoints before the end, and a clock
saves too (train.save_every_minutes), so a killed run resumes instead of starting over."""

from pathlib import Path

import pytest
import yaml

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.train.loop import train

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
PROFILES = sorted((ROOT / "recipes" / "profiles").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_every_recipe_saves_before_the_end(recipe):
    t = load_config(recipe, []).train
    assert t.save_every is not None and t.save_every < t.max_steps
    assert t.save_every_minutes == 30


@pytest.mark.parametrize("profile", PROFILES, ids=[p.stem for p in PROFILES])
def test_every_profile_saves_before_the_end(profile):
    t = yaml.safe_load(profile.read_text())["train"]
    assert 0 < t["save_every"] < 1000  # recipes run 1000+ steps


def test_time_based_saving(tiny_vl_config):
    """No step-based saving; a clock of ~0 minutes saves after every step."""
    cfg = load_config(tiny_vl_config(train={"max_steps": 3, "save_every": None, "save_every_minutes": 1e-9,
                                            "keep_last": 5}), [])
    train(build_run(cfg))
    assert sorted(p.name for p in Path(cfg.output_dir).glob("checkpoint-*")) == [f"checkpoint-{i}" for i in (1, 2, 3)]
    cfg = load_config(tiny_vl_config(train={"max_steps": 3, "save_every": None, "resume": False}), [])
    train(build_run(cfg))  # the default 30 minutes: only the final checkpoint in a 3-step run
    assert sorted(p.name for p in Path(cfg.output_dir).glob("checkpoint-*")) == ["checkpoint-3"]


def test_python_and_numpy_are_seeded_from_train_seed(tiny_vl_config):
    """Whatever state the process's global RNGs were in, a run starts them from train.seed (the
    checkpoint records them: same seed -> same states)."""
    import random

    import numpy as np

    from mmtune.train.checkpoint import read_checkpoint_state

    states = []
    for noise in (1, 2):
        random.seed(noise)
        np.random.seed(noise)
        cfg = load_config(tiny_vl_config(train={"max_steps": 1, "seed": 3, "resume": False}), [])
        train(build_run(cfg))
        saved = read_checkpoint_state(Path(cfg.output_dir) / "checkpoint-1")["rng"]
        states.append((saved["python"], saved["numpy"][1].tolist()))
    assert states[0] == states[1]
