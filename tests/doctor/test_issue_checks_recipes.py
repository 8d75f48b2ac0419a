"""No false alarms from the checks built from issue threads (MM037-MM056): every shipped recipe is silent
(no error, no warning) on the GPU it names, or an A100 when it names none."""

from __future__ import annotations

from pathlib import Path

import pytest

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml"))
CODES = [f"MM0{n}" for n in range(37, 57)]


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_is_silent(recipe, tmp_path, monkeypatch):
    import yaml

    from mmtune.doctor.registry import all_checks
    from mmtune.doctor.runner import run_doctor

    assert set(CODES) <= {c.code for c in all_checks()}
    for var in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_CONFIG_FILE"):  # no launcher around the test
        monkeypatch.delenv(var, raising=False)
    gpu = (yaml.safe_load(recipe.read_text()).get("train") or {}).get("gpu") or "a100-80gb"
    rep = run_doctor(recipe, [f"output_dir={tmp_path / 'run'}"], gpu, fast=True, only=CODES)
    loud = [f for f in rep.findings if f.severity in ("error", "warning")]
    assert loud == [], loud
