"""Every shipped recipe fits the GPU it names, by its own plan: `train.gpu`, and every
`mmtune plan recipes/NAME.yaml [key=value ...] --gpu GPU` line its header comment gives.

Planning a 7B multimodal run on 2 CPU cores takes from ~10 s (seed 001, text) to ~2 min (seed 003: Qwen3-VL with
its heatmap loss); the multimodal ones are marked slow (run them with `-m slow`)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Plans that take over a minute on 2 cores (measured 2026-11-27): the default suite skips them.
# GRPO traces every layer (the generation and the G training forwards): seed003_counting_grpo is slow too.
# qwen3_vl_moe_30b_a3b_lora: 127 s on 2 shared cores (2026-11-29; the 128 experts of 48 layers traced).
# qwen3_omni_30b_a3b_lora: the same MoE decoder, traced as long.
# glm4v_moe_106b_a12b_lora: 124 s on 2 shared cores (the 128 experts of 45 MoE layers traced, then sharded 1/8).
SLOW = {"seed002_docvqa_mixture_8gpu", "seed003_qwen3vl_fsc147_counting", "seed003_counting_grpo",
        "qwen3_vl_moe_30b_a3b_lora", "qwen3_omni_30b_a3b_lora", "glm4v_moe_106b_a12b_lora"}


def _marks(stem: str) -> list:
    return [pytest.mark.slow] if stem in SLOW else []


def named_plans() -> list[tuple[str, tuple[str, ...], str, int, int]]:
    """(recipe stem, overrides, GPU, GPUs per node, nodes) for each GPU a recipe names (plan/recipes.py)."""
    from mmtune.plan.recipes import named_plans as of_recipe

    return [(p.stem, *plan) for p in sorted((ROOT / "recipes").glob("*.yaml")) for plan in of_recipe(p)]


PLANS = named_plans()


def test_the_recipes_name_their_gpus():
    stems = {stem for stem, *_ in PLANS}
    # qwen3_omni's header spaces its command line differently (two spaces after `plan`): still read
    assert {"seed001_qwen2.5-7b_lora", "seed004_llava_clip_stage2", "qwen3_omni_30b_a3b_lora"} <= stems, PLANS
    assert ("seed004_llava_clip_stage2", ("profile=t4_qlora",), "t4", 1, 1) in PLANS
    # a model that fits no one GPU names its sharded run: the GPU count and strategy are read with it
    assert ("glm4v_moe_106b_a12b_lora", ("train.strategy=fsdp",), "h100", 8, 1) in PLANS


@pytest.mark.parametrize("stem,overrides,gpu,gpus,nodes", [
    pytest.param(s, o, g, n, m, marks=_marks(s), id=f"{s}-{'-'.join(o) or 'as-is'}-{g}" + (f"x{n * m}" if n * m > 1 else ""))
    for s, o, g, n, m in PLANS])
def test_recipe_fits_the_gpu_it_names(stem, overrides, gpu, gpus, nodes):
    from mmtune.config import load_config
    from mmtune.plan.margin import verdict_line
    from mmtune.plan.planner import predict
    from mmtune.resolve import resolve_run, target_for

    cfg = load_config(ROOT / "recipes" / f"{stem}.yaml", list(overrides))
    resolved = resolve_run(cfg, target_for(cfg, gpu, local=False, gpus=gpus, nodes=nodes))
    r = predict(resolved, gpus=gpus * nodes, nodes=nodes, strategy=resolved.strategy)  # as `mmtune plan` calls it
    assert r.fits, verdict_line(r)
    if "profile=t4_qlora" in overrides:  # the profile named on the command line makes the run a QLoRA one
        assert (r.method, r.precision, r.gpu_id) == ("qlora", "fp16", "t4")
