"""Recipes and profiles ship in the wheel: `profile=t4_qlora` and `--recipe demo_counting` work from a
plain (non-editable) install, run outside any checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mmtune.config import load_config
from mmtune.config.loader import RECIPES_DIR, available_recipes, find_config
from mmtune.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_recipes_are_found_by_name_and_by_their_checkout_path_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no recipes/ here
    assert find_config("demo_counting") == RECIPES_DIR / "demo_counting.yaml"
    assert find_config("recipes/demo_counting.yaml") == RECIPES_DIR / "demo_counting.yaml"
    cfg = load_config("recipes/demo_counting.yaml", ["profile=t4_qlora"])
    assert cfg.model.name == "tiny/qwen2-vl" and cfg.train.gpu == "t4"
    with pytest.raises(ConfigError) as e:
        find_config("demo_countin")
    assert "did you mean 'demo_counting'" in e.value.fix
    # A file of the user's own wins over a shipped recipe of the same name.
    (tmp_path / "demo_counting.yaml").write_text("model: {name: tiny/qwen2}\n")
    assert find_config("demo_counting.yaml") == Path("demo_counting.yaml")


def test_the_package_holds_the_recipes_of_the_checkout():
    import mmtune

    assert RECIPES_DIR == Path(mmtune.__file__).resolve().parent / "recipes"
    assert set(available_recipes()) == {p.stem for p in (ROOT / "recipes").glob("*.yaml")}


@pytest.mark.skipif(not (ROOT / "pyproject.toml").is_file(), reason="needs the source tree")
def test_a_wheel_installed_outside_the_checkout_resolves_profiles_and_recipes(tmp_path):
    src = tmp_path / "src_copy"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "src", src / "src", symlinks=True, ignore=ignore)
    shutil.copytree(ROOT / "recipes", src / "recipes", ignore=ignore)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist")], check=True, capture_output=True)
    [wheel] = (tmp_path / "dist").glob("mmtune-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # Every file under recipes/: the recipes and profiles, and the example data and media they name.
    shipped = [p for p in (ROOT / "recipes").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert any(p.suffix == ".jsonl" for p in shipped) and any(p.suffix == ".png" for p in shipped)
    missing = [p for p in shipped if f"mmtune/recipes/{p.relative_to(ROOT / 'recipes').as_posix()}" not in names]
    assert not missing, f"not in the wheel: {missing[:10]}"
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import mmtune, sys; from mmtune.config import load_config; "
            "c = load_config('demo_counting', ['profile=t4_qlora']); "
            "print(mmtune.__file__); print(c.train.gpu, c.model.name)")
    out = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(site)}, check=True).stdout.split("\n")
    assert out[0].startswith(str(site))  # the installed copy, not the checkout
    assert out[1] == "t4 tiny/qwen2-vl"
    # Every recipe, loaded by name from there, finds each data path it names inside the installed package.
    probe = subprocess.run([sys.executable, "-c", _PROBE, str(site / "mmtune"), json.dumps(available_recipes())],
                           cwd=elsewhere, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(site)})
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert json.loads(probe.stdout) == {}, "recipe data paths missing from the installed wheel"


# Loads every shipped recipe by name (the installed copy's mmtune) and lists, per recipe, the data paths that
# do not exist or lie outside the installed package.
_PROBE = """
import json, sys
from pathlib import Path
from mmtune.config.loader import load_config
root, bad = Path(sys.argv[1]).resolve(), {}
def walk(v):
    if isinstance(v, dict):
        return [s for x in v.values() for s in walk(x)]
    if isinstance(v, list):
        return [s for x in v for s in walk(x)]
    return [v] if isinstance(v, str) and "recipes" in v else []
for name in json.loads(sys.argv[2]):
    for s in walk(load_config(name).data.model_dump(mode="json")):
        p = Path(s.partition("::")[0])
        if not p.exists() or not p.resolve().is_relative_to(root):
            bad.setdefault(name, []).append(s)
print(json.dumps(bad))
"""


def _data_strings(value) -> list[str]:
    """Every string in a recipe's `data` section (single sources, mixtures, eval splits, media roots)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in _data_strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _data_strings(v)]
    return [value] if isinstance(value, str) else []


def test_recipes_name_their_data_as_paths_under_recipes_that_exist():
    import yaml

    named = []
    for p in sorted((ROOT / "recipes").glob("*.yaml")):
        data = (yaml.safe_load(p.read_text()) or {}).get("data") or {}
        named += [(p.stem, s.partition("::")[0]) for s in _data_strings(data) if s.startswith("recipes/")]
    assert len(named) >= 10  # the image / audio / video / published examples: not a vacuous pass
    assert [(n, f) for n, f in named if not (ROOT / f).exists()] == []


def test_a_recipe_loaded_outside_a_checkout_reads_the_packaged_data(tmp_path, monkeypatch):
    from mmtune.config.loader import config_sources

    monkeypatch.chdir(tmp_path)  # no recipes/ here: the recipe's relative paths do not exist
    cfg = load_config("qwen2_vl_7b_lora")
    train = Path(cfg.data.train)
    assert train.is_absolute() and train.resolve() == (RECIPES_DIR / "data" / "image_qa.jsonl").resolve()
    assert "installed package" in config_sources(cfg)["data.train"]  # said among the run's decisions
    mix = load_config("seed002_docvqa_mixture_8gpu")
    assert all(Path(s.path).exists() for s in mix.data.train)
    # A command-line path is the user's: left as given, even when it does not exist.
    assert load_config("qwen2_vl_7b_lora", ["data.train=recipes/data/mine.jsonl"]).data.train == "recipes/data/mine.jsonl"


def test_a_recipe_in_a_checkout_keeps_its_relative_paths(monkeypatch):
    from mmtune.config.loader import config_sources

    monkeypatch.chdir(ROOT)
    cfg = load_config("recipes/qwen2_vl_7b_lora.yaml")
    assert cfg.data.train == "recipes/data/image_qa.jsonl" and "data.train" not in config_sources(cfg)


def test_the_doctor_reads_the_packaged_data_outside_a_checkout(tmp_path, monkeypatch):
    from mmtune.doctor.runner import make_context

    monkeypatch.chdir(tmp_path)
    ctx = make_context("qwen2_vl_7b_lora")
    assert Path(ctx.need("cfg").data.train).is_file() and "installed package" in ctx.sources["data.train"]
