"""The shipped recipes work from a wheel (issue 30, item 5): the wheel carries every file under recipes/
(the example data and media the recipes name included), and a recipe loaded outside a checkout reads its
`recipes/data/...` paths from the installed package instead of failing on a missing relative path."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted(p.stem for p in (ROOT / "recipes").glob("*.yaml"))


def _data_strings(value) -> list[str]:
    """Every string in a recipe's `data` section (paths of single sources, mixtures, eval splits, media roots)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in _data_strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _data_strings(v)]
    return [value] if isinstance(value, str) else []


def _shipped_paths() -> dict[str, list[str]]:
    import yaml

    out = {}
    for name in RECIPES:
        data = (yaml.safe_load((ROOT / "recipes" / f"{name}.yaml").read_text()) or {}).get("data") or {}
        out[name] = [s.partition("::")[0] for s in _data_strings(data) if s.startswith("recipes/")]
    return out


def test_recipes_name_their_data_as_paths_under_recipes():
    paths = _shipped_paths()
    assert sum(map(len, paths.values())) >= 10  # the image/audio/video/published examples, not a vacuous pass
    for name, files in paths.items():
        for f in files:
            assert (ROOT / f).exists(), f"{name} names {f}, which is not in the checkout"


def test_a_recipe_loaded_outside_a_checkout_reads_the_packaged_data(tmp_path, monkeypatch):
    from mmtune.config.loader import RECIPES_DIR, config_sources, load_config

    monkeypatch.chdir(tmp_path)  # no recipes/ here: the relative paths do not exist
    cfg = load_config("qwen2_vl_7b_lora")
    train = Path(cfg.data.train)
    assert train.is_absolute() and train.is_file()
    assert train.resolve() == (RECIPES_DIR / "data" / "image_qa.jsonl").resolve()
    assert "installed package" in config_sources(cfg)["data.train"]  # said among the run's decisions
    mix = load_config("seed002_docvqa_mixture_8gpu")
    assert all(Path(s.path).exists() for s in mix.data.train)
    # A command-line path is the user's: left as given, even when it does not exist.
    mine = load_config("qwen2_vl_7b_lora", ["data.train=recipes/data/mine.jsonl"])
    assert mine.data.train == "recipes/data/mine.jsonl"


def test_a_recipe_in_a_checkout_keeps_its_relative_paths(monkeypatch):
    from mmtune.config.loader import config_sources, load_config

    monkeypatch.chdir(ROOT)
    cfg = load_config("recipes/qwen2_vl_7b_lora.yaml")
    assert cfg.data.train == "recipes/data/image_qa.jsonl" and "data.train" not in config_sources(cfg)


# Loads every shipped recipe by name in a process that imports mmtune from the unpacked wheel, from a
# folder outside any checkout, and lists the data paths that do not exist (or lie outside the wheel).
_PROBE = """
import json, sys
from pathlib import Path
from mmtune.config.loader import load_config
root, bad = Path(sys.argv[1]).resolve(), {}
for name in json.loads(sys.argv[2]):
    cfg = load_config(name).data.model_dump(mode="json")
    def walk(v):
        if isinstance(v, dict):
            return [s for x in v.values() for s in walk(x)]
        if isinstance(v, list):
            return [s for x in v for s in walk(x)]
        return [v] if isinstance(v, str) and "recipes" in v else []
    for s in walk(cfg):
        p = Path(s.partition("::")[0])
        if not p.exists() or not p.resolve().is_relative_to(root):
            bad.setdefault(name, []).append(s)
print(json.dumps(bad))
"""


def test_the_wheel_ships_every_recipe_file_and_each_recipe_finds_its_data(tmp_path):
    pytest.importorskip("setuptools", reason="building the wheel needs setuptools (the build backend)")
    tree = tmp_path / "tree"  # a copy: the build writes build/ and *.egg-info beside the sources
    tree.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    shutil.copytree(ROOT / "src", tree / "src", symlinks=True, ignore=skip)
    shutil.copytree(ROOT / "recipes", tree / "recipes", ignore=skip)
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, tree / f)
    # No network: the build backend is this environment's setuptools, nothing is downloaded.
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-q", "-w", str(tmp_path / "dist"), str(tree)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("mmtune-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    recipe_files = [p.relative_to(ROOT).as_posix() for p in (ROOT / "recipes").rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts]
    missing = [f for f in recipe_files if f"mmtune/{f}" not in names]
    assert not missing, f"not in the wheel: {missing[:10]}"

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = subprocess.run([sys.executable, "-c", _PROBE, str(site / "mmtune"), json.dumps(RECIPES)], cwd=elsewhere,
                           capture_output=True, text=True, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert json.loads(probe.stdout) == {}, "recipe data paths missing from the installed wheel"
