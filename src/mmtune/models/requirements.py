"""Packages a family's model class needs beyond mmtune's own dependencies (`Family.requires`), checked before
any build -- real weights, `meta` for the planner, a tiny twin -- so a missing one is one clear error naming the
install line, not an ImportError from deep inside transformers (Gemma 3n's vision tower is a timm model:
`TimmWrapperModel` raises on construction, on `meta` too, without timm; timm itself imports torchvision)."""

from __future__ import annotations

import importlib.util

from ..errors import ModelLoadError
from .families import Family


class MissingPackageError(ModelLoadError):
    """The family's model needs a package this Python does not have (doctor MM127 reports it)."""


def missing_packages(family: Family) -> list[tuple[str, str]]:
    """(package, why) for each package of `family.requires` this Python cannot import."""
    return [(pkg, why) for pkg, why in family.requires if importlib.util.find_spec(pkg) is None]


def install_line(packages: list[str]) -> str:
    """The pip line; torchvision must be the build made for the installed torch (its wheels pin one torch)."""
    line = "pip install " + " ".join(packages)
    if "torchvision" in packages:
        import torch

        line += (f"  (torchvision is built against one torch release: pick the torchvision matching torch "
                 f"{torch.__version__.split('+')[0]} for your CUDA/CPU build, https://pytorch.org/get-started/locally, "
                 "so that pip does not replace torch)")
    return line


def check_requirements(family: Family) -> None:
    missing = missing_packages(family)
    if missing:
        names = [p for p, _ in missing]
        raise MissingPackageError(
            f"{family.name} ({family.model_class}) needs {', '.join(names)}, not installed here: "
            + "; ".join(f"{p}: {why}" for p, why in missing), where="model.name", fix=install_line(names))
