"""Preference / RL objectives train with LoRA dropout off unless the config sets it (config/format_defaults.py):
the loss compares the policy's log-probabilities with the reference's, which has no LoRA dropout."""

from __future__ import annotations

import pytest

from mmtune.config import load_config
from mmtune.config.loader import config_sources


@pytest.mark.parametrize("objective", ["dpo", "grpo"])
def test_dpo_and_grpo_turn_lora_dropout_off_and_say_why(objective):
    cfg = load_config(None, ["model.name=tiny/qwen2", "data.train=synthetic:counting", f"train.objective={objective}"])
    assert cfg.adapter.dropout == 0.0
    assert config_sources(cfg)["adapter.dropout"].startswith(f"train.objective={objective}'s default")


def test_a_dropout_the_config_sets_is_kept_and_sft_keeps_the_default():
    kept = load_config(None, ["model.name=tiny/qwen2", "data.train=synthetic:counting", "train.objective=dpo",
                              "adapter.dropout=0.1"])
    assert kept.adapter.dropout == 0.1
    assert config_sources(kept)["adapter.dropout"].startswith("command line")
    sft = load_config(None, ["model.name=tiny/qwen2", "data.train=synthetic:counting"])
    assert sft.adapter.dropout == 0.05 and "adapter.dropout" not in config_sources(sft)


def test_the_built_dpo_policy_has_no_lora_dropout(tmp_path):
    from mmtune.build import build_run
    from tests.train.test_dpo_loop import make_pairs

    data = make_pairs(tmp_path / "data", 4)
    cfg = load_config(None, ["model.name=tiny/qwen2-vl", f"data.train={data}", "data.format=preference",
                             "data.max_length=256", "adapter.r=4", "train.objective=dpo", "train.max_steps=1",
                             "train.precision=fp32", "train.device=cpu", "logging.tensorboard=false",
                             f"output_dir={tmp_path / 'run'}"])
    run = build_run(cfg)
    drops = [m.lora_dropout["default"] for m in run.model.modules() if hasattr(m, "lora_dropout")]
    assert drops and all(isinstance(d, __import__("torch").nn.Identity) for d in drops)
    assert any(d.startswith("config adapter.dropout: 0.0") and "train.objective=dpo" in d for d in run.decisions)
