"""train.objective=grpo, a first version: completions sampled inside the loop's one step, scored by the task
metrics as rewards, group-normalised advantages; logged rewards; exact resume; the plan models it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.train.loop import train


def _cfg(tmp_path, out, *extra):
    return load_config(None, [
        "model.name=tiny/qwen2", "model.gradient_checkpointing=false", "data.train=synthetic:arithmetic",
        "data.synthetic_train_size=16", "data.max_length=64", "adapter.r=4", "adapter.dropout=0",
        "train.objective=grpo", "train.grpo.generations=3", "train.grpo.max_completion_length=3",
        "train.grpo.rewards=[{name: exact_match}, {name: count, weight: 0.5}]", "train.max_steps=4",
        "train.micro_batch_size=2", "train.lr=1e-3", "train.precision=fp32", "train.device=cpu", "train.save_every=2",
        "train.scheduler=constant", "train.warmup_steps=0", "logging.tensorboard=false", f"output_dir={tmp_path / out}",
        *extra])


LOGGED = ("loss", "reward", "reward_std", "reward/exact_match", "reward/exact_match_std", "reward/count",
          "reward/count_std", "completion_length", "kl", "clip_ratio", "grad_norm", "lr")


def _rows(out: Path):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]


def test_grpo_samples_scores_and_logs(tmp_path):
    cfg = _cfg(tmp_path, "run", "train.grpo.beta=0.05")
    run = build_run(cfg)
    assert any(d.startswith("train.objective: grpo (G=3") for d in run.decisions)
    train(run)
    rows = _rows(Path(cfg.output_dir))
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        for k in LOGGED:
            assert k in r and r[k] == r[k], (k, r)
        assert 0 < r["completion_length"] <= 3 and r["clip_ratio"] == 0
        assert r["reward"] == pytest.approx(r["reward/exact_match"] + 0.5 * r["reward/count"], abs=1e-9)
        assert 0 <= r["reward/count_std"] <= 0.5 and 0 <= r["reward/exact_match_std"] <= 0.5  # rewards in [0, 1]
    assert rows[0]["kl"] == 0  # step 1: the policy is the reference (LoRA B = 0)
    from mmtune.report import write_report

    html = write_report([Path(cfg.output_dir)]).read_text()  # report.html: the decision and the GRPO charts
    assert "train.objective: grpo" in html
    for title in ("GRPO reward:", "GRPO completion length", "GRPO KL to the reference", "GRPO clipped share"):
        assert title in html, title


def test_a_grpo_run_killed_mid_way_resumes_bit_identically(tmp_path, monkeypatch):
    """Killed after step 3 (checkpoint-2 the last), started again: the same completions are sampled at steps 3
    and 4 (the sampling RNG comes back with the checkpoint), so every logged figure and the final weights equal
    the run that never stopped. With beta > 0 the reference forward (adapters off) is in the step too."""
    import torch
    from safetensors.torch import load_file

    extra = ("train.grpo.beta=0.05",)
    train(build_run(_cfg(tmp_path, "straight", *extra)))
    broken = _cfg(tmp_path, "broken", *extra)
    assert train(build_run(broken), stop_after=3) is None
    train(build_run(broken))
    a, b = _rows(tmp_path / "straight"), _rows(tmp_path / "broken")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for x, y in zip(a, b):
        for k in LOGGED:
            assert x[k] == y[k], (k, x, y)
    wa = load_file(str(tmp_path / "straight" / "checkpoint-4" / "trainable.safetensors"))
    wb = load_file(str(tmp_path / "broken" / "checkpoint-4" / "trainable.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)

    # The comparison above can fail: resumed with another sampling RNG state, steps 3-4 sample other completions.
    from mmtune.train import checkpoint

    real = checkpoint.set_rng_state
    monkeypatch.setattr(checkpoint, "set_rng_state",
                        lambda state: real({**state, "torch": torch.Generator().manual_seed(99).get_state()}))
    other = _cfg(tmp_path, "other_rng", *extra)
    assert train(build_run(other), stop_after=3) is None
    train(build_run(other))
    c = _rows(tmp_path / "other_rng")
    assert [r["loss"] for r in c[:2]] == [r["loss"] for r in a[:2]]
    assert [(r["loss"], r["reward"], r["completion_length"]) for r in c[2:]] != \
        [(r["loss"], r["reward"], r["completion_length"]) for r in a[2:]]


def test_rewards_are_the_metrics_and_check_what_they_return():
    from mmtune.evaluate.rewards import check_reward, reward_function, score

    refs = [["3"], ["3"], ["5"]]
    assert reward_function("exact_match")(["3", "4", "3"], refs) == [1.0, 0.0, 0.0]
    assert reward_function("count")(["3", "about 5", "no idea"], refs) == [1.0, 1 / 3, 0.0]
    assert reward_function("exact_match")(["three"], [["3"]]) == [1.0]  # the VQA normalisation: words -> digits
    assert reward_function("format", r"\d+")([" 12 ", "x1"], [[""], [""]]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="did you mean 'exact_match'"):
        check_reward("exact_mach")
    with pytest.raises(ValueError, match="needs `pattern`"):
        check_reward("format")
    from mmtune.errors import ConfigError

    with pytest.raises(ConfigError, match="one finite number per completion"):
        score(lambda c, r: ["yes"] * len(c), "mine", ["a"], [["a"]])
    custom = reward_function("mmtune.evaluate.rewards:_count")  # the import-path contract
    assert custom(["2"], [["2"]]) == [1.0]
    with pytest.raises(ConfigError, match="cannot be imported"):
        reward_function("no_such_module:fn")


def test_plan_models_grpo_text_only():
    """The plan of a text-only grpo run (tiny Qwen2): its generation phase and G training sequences
    (tests/plan/test_grpo_plan.py compares a multimodal one with a real step)."""
    from mmtune.plan.planner import predict

    cfg = load_config(None, ["model.name=tiny/qwen2", "train.objective=grpo", "data.max_length=64",
                             "train.grpo.generations=3", "train.grpo.max_completion_length=8", "train.device=cpu"])
    r = predict(cfg)
    assert r.generation["sequences_per_micro_batch"] == 3 * cfg.train.micro_batch_size
    assert r.generation["prompt_tokens"] + 8 == r.batch["tokens_per_record"] == 64
    assert r.peak_phase in ("generation", *(f"training ({p})" for p in ("forward", "loss", "backward", "optimizer")))


def test_plan_command_names_the_generation_phase(tmp_path):
    """`mmtune plan` on a grpo run prints its generation phase beside the training micro-batches."""
    import yaml
    from typer.testing import CliRunner

    from mmtune.cli import app

    cfg = tmp_path / "g.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"name": "tiny/qwen2"}, "data": {"train": "synthetic:arithmetic",
                                                                              "max_length": 64},
                                   "train": {"objective": "grpo", "grpo": {"generations": 3}}}))
    res = CliRunner().invoke(app, ["plan", str(cfg), "--gpu", "l4"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())  # the table's title may wrap
    assert "3 generate calls of" in out
    assert "breakdown at the peak (phase: training (" in out or "(phase: generation)" in out
