"""No false alarms from the checks built from issue threads (MM037-MM056): every shipped recipe is silent
(no error, no warning) on the GPU it names, or an A100 when it names none."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.family_registry import TWINS

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


TINY = TWINS  # every registered family's tiny twin (tests/family_registry.py)


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("adapter", [{}, {"method": "qlora"}, {"method": "full"}, {"train_components": ["projector"]}])
def test_every_family_default_setups_are_silent(name, adapter, tmp_path, monkeypatch):
    """Each architecture with the common adapter setups, on a bf16 GPU and on a T4: nothing to say."""
    import yaml

    from mmtune.doctor.runner import run_doctor

    if name == "tiny/qwen2" and adapter.get("train_components"):
        return  # no projector in a text-only model (a config error, not these checks')
    for var in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_CONFIG_FILE"):
        monkeypatch.delenv(var, raising=False)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"name": name}, "data": {"train": "synthetic:counting"}, "adapter": adapter,
                                   "output_dir": str(tmp_path / "run")}))
    for gpu in ("a100-80gb", "t4"):
        rep = run_doctor(cfg, [], gpu, fast=True, only=CODES)
        assert [f for f in rep.findings if f.severity in ("error", "warning")] == [], (gpu, rep.findings)
        assert not rep.not_run, rep.not_run
