"""Every shipped recipe runs end to end through its tiny twin with --smoke (data, adapters, loss,
eval, checkpoint), as a user would test a recipe on a laptop before renting a GPU."""

import json
from pathlib import Path

import pytest

RECIPES = sorted(p for p in (Path(__file__).resolve().parents[1] / "recipes").glob("*.yaml"))
# What the seed recipes' summary.json must report after a smoke run (their eval sets are the look-alikes
# of the published datasets written by recipes/data/make_published.py).
EXPECTED_EVAL = {
    "seed002_docvqa_mixture_8gpu": ("chartqa/relaxed_accuracy", "infovqa/anls", "ocrvqa/exact_match",
                                    "ocrvqa/vqa_accuracy", "mixture/score", "eval_loss"),
    "seed003_qwen3vl_fsc147_counting": ("mae", "rmse", "unparsable", "eval_loss"),
    "seed003_counting_grpo": ("mae", "rmse", "unparsable", "eval_loss"),
}

EXPECTED_TRAIN_LOSSES = {"seed003_qwen3vl_fsc147_counting": ("loss", "lm_loss", "aux/heatmap")}
# GRPO recipes: what every training row logs (its loss is a policy-gradient surrogate: near 0, of either sign).
EXPECTED_GRPO_LOG = {"seed003_counting_grpo": ("reward", "reward_std", "reward/count", "reward/count_std", "reward/format",
                                               "reward/format_std", "completion_length", "kl", "clip_ratio")}


def test_there_are_recipes():
    names = {p.name for p in RECIPES}
    assert "demo_counting.yaml" in names


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_smoke(recipe, tmp_path, monkeypatch):
    from mmtune.commands.train import run_training

    monkeypatch.chdir(recipe.parents[1])  # recipes name their data relative to the repo root
    summary = run_training(recipe, [f"output_dir={tmp_path / 'run'}"], smoke=True)
    out = tmp_path / "run-smoke"
    assert summary["steps"] >= 1
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if r["kind"] == "train"]
    if recipe.stem in EXPECTED_GRPO_LOG:
        assert losses and all(x == x and abs(x) < 1e4 for x in losses)
        assert all(set(EXPECTED_GRPO_LOG[recipe.stem]) <= set(r) for r in rows if r["kind"] == "train"), rows
    else:
        assert losses and all(x == x and 0 < x < 1e4 for x in losses)
    # a checkpoint with the trained weights: trainable.safetensors, or under train.strategy=fsdp (kept even on one
    # process, so the run resumes on its GPUs) the sharded state beside the gathered adapter export
    assert any(out.glob("checkpoint-*/trainable.safetensors")) or (
        any(out.glob("checkpoint-*/sharded")) and any(out.glob("checkpoint-*/adapter/adapter_model.safetensors")))
    if recipe.stem in EXPECTED_EVAL:
        summary = json.loads((out / "summary.json").read_text())
        assert set(EXPECTED_EVAL[recipe.stem]) <= set(summary["eval"]), summary["eval"]
        assert summary["best"]["metric"] in summary["eval"]
    if recipe.stem in EXPECTED_TRAIN_LOSSES:  # the dual loss: each part logged, in metrics and summary
        summary = json.loads((out / "summary.json").read_text())
        assert set(EXPECTED_TRAIN_LOSSES[recipe.stem]) <= set(summary["train_losses"]), summary
        assert all(summary["train_losses"][k] > 0 for k in EXPECTED_TRAIN_LOSSES[recipe.stem])
        assert all(set(EXPECTED_TRAIN_LOSSES[recipe.stem]) <= set(r) for r in rows if r["kind"] == "train")
