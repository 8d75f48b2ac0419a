"""Recipes and profiles ship in the wheel: `profile=t4_qlora` and `--recipe demo_counting` work from a
plain (non-editable) install, run outside any checkout."""

from __future__ import annotations

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
    for p in (ROOT / "recipes").rglob("*.yaml"):
        assert f"mmtune/recipes/{p.relative_to(ROOT / 'recipes').as_posix()}" in names
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
