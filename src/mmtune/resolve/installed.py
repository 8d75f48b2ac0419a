"""What is installed where the run executes, against what mmtune was installed for.

pip checks mmtune's requirements once, at install time. A later `pip install` of another tool (a pinned
transformers, an older peft, numpy 2) replaces a package under mmtune with only a warning, and the run then
stops deep inside a library: "cannot import name 'Qwen2_5_VLForConditionalGeneration'", "LoraConfig got an
unexpected keyword argument", "undefined symbol" from a compiled extension built for another torch. These
helpers say so before anything is built: the doctor's MM188 and, through it, `mmtune train`'s fast checks.
"""

from __future__ import annotations

from functools import lru_cache


def unmet_requirements() -> list[tuple[str, str, str | None]] | None:
    """mmtune's own core requirements (its installed metadata, i.e. pyproject.toml's `dependencies`) that the
    installed packages do not meet: (name, the requirement, the installed version or None when absent).
    None when mmtune's metadata cannot be read (run from a source tree that was never installed)."""
    from importlib.metadata import PackageNotFoundError, requires, version

    from packaging.requirements import InvalidRequirement, Requirement

    try:
        declared = requires("mmtune") or []
    except PackageNotFoundError:
        return None
    unmet = []
    for line in declared:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an extra's package (qlora, gpu, ...): its own checks look where the run needs it
        try:
            have = version(req.name)
        except PackageNotFoundError:
            unmet.append((req.name, str(req), None))
            continue
        # a local build tag (2.13.0+cpu) or a dev / rc build of a newer release still meets a floor
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            unmet.append((req.name, str(req), have))
    return unmet


@lru_cache(maxsize=None)
def import_problem(module: str) -> str | None:
    """Why `module`, which is installed (find_spec finds it), does not import here, or None. A compiled
    extension built for another torch / CUDA ("undefined symbol"), another numpy ("A module that was compiled
    using NumPy 1.x cannot be run in NumPy 2"), or without its native library is found by find_spec but fails
    on import, which transformers does only when the model is built or its first forward runs. Imported once
    per process; the module is loaded only where the run would load it anyway."""
    import importlib

    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - ImportError, OSError, RuntimeError (bitsandbytes' CUDA setup)...
        text = " ".join(str(e).split())
        return f"{type(e).__name__}: {text[:300]}" + ("..." if len(text) > 300 else "")
    return None


def rebuild_hint(module: str, package: str, against: str = "torch") -> str:
    """The fix for a compiled package that does not import: reinstall it built for this torch (CUDA extensions)
    or this numpy (`against="numpy"`: media readers)."""
    if against == "numpy":
        import numpy

        return (f"reinstall {package} built for this numpy {numpy.__version__}: pip install --force-reinstall "
                f"--no-cache-dir {package} (or the numpy it was built for)")
    import torch

    cuda = torch.version.cuda or "none (a CPU build)"
    return (f"reinstall {package} built for this torch {torch.__version__} (CUDA {cuda}): pip uninstall -y {package} "
            f"&& pip install --no-cache-dir --no-build-isolation {package}")
