"""Installable like a library (issue 15): the dependencies declared are the ones imported, every install
hint names an extra that exists and holds what it installs, and QLoRA without bitsandbytes says which."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "mmtune"
# import name -> distribution name, where they differ
DIST = {"PIL": "pillow", "yaml": "pyyaml", "huggingface_hub": "huggingface-hub", "av": "av", "liger_kernel": "liger-kernel"}
# Declared, never imported by mmtune itself: what a library mmtune calls needs at run time and does not declare.
# (num2words: a fresh `pip install -e ".[dev]"` without it failed the 21 SmolVLM tests; this machine's
# interpreter happened to have it.)
USED_BY_LIBRARIES = {"tensorboard": "torch.utils.tensorboard's backend",
                     "num2words": "transformers' SmolVLM processor refuses to start without it"}
# Imported only when the matching feature is asked for, each declared in the extra named here.
OPTIONAL = {"bitsandbytes": "qlora", "flash_attn": "gpu", "wandb": "track", "mlflow": "track", "deepspeed": "deepspeed",
            "liger_kernel": "gpu", "fastapi": "serve", "uvicorn": "serve", "zstandard": "zstd"}


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(req: str) -> str:
    return re.split(r"[<>=\[ ;]", req, maxsplit=1)[0].lower()


def _imported() -> set[str]:
    mods = set()
    for p in SRC.rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Import):
                mods |= {a.name.split(".")[0] for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                mods.add(n.module.split(".")[0])
    return {m for m in mods if m not in sys.stdlib_module_names and m != "mmtune"}


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_declared_dependencies_are_the_imported_ones():
    proj = _pyproject()["project"]
    core = {_name(r) for r in proj["dependencies"]}
    extras = {k: {_name(r) for r in v} for k, v in proj["optional-dependencies"].items()}
    used = {DIST.get(m, m).replace("_", "-").lower() for m in _imported()}
    optional_used = {DIST.get(m, m).replace("_", "-") for m in OPTIONAL}
    assert used - core - optional_used == set(), "imported but not declared"
    assert core - used == set(USED_BY_LIBRARIES), "declared but never imported"
    for mod, extra in OPTIONAL.items():  # "mmtune[qlora]" inside an extra pulls that extra in
        assert mod.replace("_", "-") in extras[extra] | (extras["qlora"] if "mmtune" in extras[extra] else set())
    assert "bitsandbytes" not in core and extras["qlora"] == {"bitsandbytes"}  # one truth: the qlora extra
    assert "mmtune" in extras["gpu"] and "mmtune" in extras["dev"]  # both pull in [qlora]
    assert not {"hypothesis", "torchvision"} & (core | set().union(*extras.values()))  # unused: not pinned


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_every_install_hint_names_an_extra_that_holds_it():
    extras = _pyproject()["project"]["optional-dependencies"]
    hints = []
    for p in SRC.rglob("*.py"):
        hints += [(p.name, m) for m in re.findall(r"mmtune\[(\w+)\]", p.read_text())]
    assert hints
    for where, extra in hints:
        assert extra in extras, f"{where} names mmtune[{extra}], which pyproject does not define"
    bnb_hints = [line for p in SRC.rglob("*.py") for line in p.read_text().splitlines()
                 if "mmtune[" in line and ("bitsandbytes" in line or "8bit" in line or "qlora" in line.lower())]
    assert bnb_hints and all("mmtune[qlora]" in line for line in bnb_hints)


def test_qlora_without_bitsandbytes_names_the_extra(monkeypatch):
    from mmtune.errors import ConfigError
    from mmtune.models.quantize import require_bitsandbytes

    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # what an environment without it imports
    with pytest.raises(ConfigError) as e:
        require_bitsandbytes()
    assert "pip install 'mmtune[qlora]'" in e.value.fix and e.value.where == "adapter.method"
