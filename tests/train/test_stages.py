"""Staged unfreezing (train.stages): each stage updates only its parameters, at its LR multiplier; a
run killed after a stage boundary and resumed equals one that never stopped."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.errors import ConfigError
from mmtune.train.loop import train

STAGES = {"stages": [{"until": 2, "train": ["projector"]},
                     {"until": 4, "train": ["projector", "decoder_lora"], "lr_multiplier": 0.5},
                     {"train": ["projector", "decoder_lora", "vision_last_1"]}]}


def _rows(out: Path):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]


def _cfg(tiny_vl_config, out, **train):
    train = {"max_steps": 6, "save_every": 2, "grad_accum": 1, "keep_last": 3, "scheduler": "constant",
             **STAGES, **train}
    return load_config(tiny_vl_config(train=train), [f"output_dir={out}"])


def test_each_stage_updates_only_its_parameters(tiny_vl_config, tmp_path):
    cfg = _cfg(tiny_vl_config, tmp_path / "run")
    run = build_run(cfg)
    before = {n: p.detach().clone() for n, p in run.unwrapped_model().named_parameters() if p.requires_grad}
    assert any("visual.blocks" in n for n in before) and any("lora_B" in n for n in before)
    assert any("train.stages" in line and "decoder_lora" in line for line in run.decisions)  # start-up summary
    train(run)
    out = Path(cfg.output_dir)
    assert "train.stages" in (out / "config.resolved.yaml").read_text()

    def changed(step, what):
        saved = load_file(str(out / f"checkpoint-{step}" / "trainable.safetensors"))
        return any(not torch.equal(saved[n], before[n]) for n in saved if what(n))

    lora = lambda n: "lora_" in n  # noqa: E731
    vision = lambda n: "visual.blocks" in n and "lora_" not in n  # noqa: E731
    projector = lambda n: "visual.merger" in n  # noqa: E731
    assert changed(2, projector) and not changed(2, lora) and not changed(2, vision)
    assert changed(4, lora) and not changed(4, vision)
    assert changed(6, vision)
    rows = _rows(out)
    assert [r["stage"] for r in rows] == [0, 0, 1, 1, 2, 2]
    # stage 1 runs at half the scheduled LR (constant schedule here)
    assert rows[2]["lr"] == pytest.approx(rows[4]["lr"] * 0.5)


def test_resume_across_a_stage_boundary_equals_an_uninterrupted_run(tiny_vl_config, tmp_path):
    straight = _cfg(tiny_vl_config, tmp_path / "straight")
    train(build_run(straight))
    broken = _cfg(tiny_vl_config, tmp_path / "broken")
    assert train(build_run(broken), stop_after=3) is None  # killed in stage 1, after the boundary at 2
    # (its checkpoint is step 2: the resumed run redoes step 3 and crosses into stage 2 at step 5)
    train(build_run(broken))
    a, b = _rows(tmp_path / "straight"), _rows(tmp_path / "broken")
    assert [r["step"] for r in b] == list(range(1, 7))
    for x, y in zip(a, b):
        assert abs(x["loss"] - y["loss"]) < 1e-6, (x, y)
        assert x["lr"] == pytest.approx(y["lr"]) and x["stage"] == y["stage"]


def test_a_unit_that_selects_nothing_is_a_config_error(tiny_vl_config, tmp_path):
    cfg = load_config(tiny_vl_config(train={"stages": [{"train": ["audio"]}]}), [])
    with pytest.raises(ConfigError, match="audio"):
        build_run(cfg)


def test_plan_holds_every_stages_parameters():
    """The planner traces the union of the stages: at least the most expensive one (vision blocks)."""
    from mmtune.plan.batch import Declared
    from mmtune.plan.planner import predict

    base = ["model.name=tiny/qwen2-vl", "data.max_length=256", "train.precision=fp32"]
    first = predict(load_config(None, base + ["train.stages=[{train: [projector]}]"]), declared=Declared(images=[(112, 112)]))
    staged = predict(load_config(None, base + ["train.stages=[{until: 2, train: [projector]}, "
                                               "{train: [projector, lora, vision_last_1]}]"]),
                     declared=Declared(images=[(112, 112)]))
    assert staged.breakdown["trainable_parameters"] > first.breakdown["trainable_parameters"]
    assert staged.tensor_peak_bytes > first.tensor_peak_bytes
