"""A checkpoint's own Python code (config.json `auto_map`, run under `model.trust_remote_code=true`) against the
installed transformers: read from the folder's .py files, never executed.

Remote code is written for the transformers of its day and is not maintained with transformers' own models
(maintainers' word in https://github.com/huggingface/transformers/issues/39336), so an upgrade breaks it where
the installed transformers no longer has a name it imports or a cache method it calls ("cannot import name
...", "'DynamicCache' object has no attribute 'seen_tokens' / 'get_max_length'": Ucas-HaoranWei/GOT-OCR2.0#313,
huggingface/transformers#36071). Each import is resolved against the installed transformers itself, so the
check follows whichever version is installed instead of a list of removals. A model type transformers has
built in (Phi-3, Qwen2-VL) but whose checkpoint still ships code runs that old code under trust_remote_code
(transformers prefers the repository's classes when allowed to): the built-in one is the fix.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from ..findings import error, warning
from ..registry import check
from .model_setup import model_dir, raw_config

_MAX_FILES = 24  # a checkpoint ships a handful of .py files; more means a vendored package, not model code
_MAX_MODULES = 12  # distinct transformers modules imported (each import costs up to ~1 s cold)
# DynamicCache methods / attributes remote code of the 4.3x-4.4x era calls; reported when the installed
# DynamicCache lacks them (checked with hasattr at run time, not assumed).
_CACHE_USES = re.compile(r"\.(seen_tokens|get_max_length|get_usable_length|to_legacy_cache|from_legacy_cache)\b")


def _code_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.py"))[:_MAX_FILES]


def _transformers_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) of every absolute `transformers...` import in one file."""
    try:
        tree = ast.parse(path.read_text(errors="replace"), filename=str(path))
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "transformers":
            out.extend((node.lineno, node.module, a.name) for a in node.names if a.name != "*")
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "transformers")
    return out


def _has(mod, name: str) -> bool:
    try:  # transformers' lazy top-level module imports the submodule behind `name` here
        return hasattr(mod, name)
    except (ImportError, RuntimeError):
        return False


def _missing_imports(files: list[Path]) -> list[tuple[str, str]]:
    """(file:line, what the installed transformers lacks) for imports that would raise ImportError."""
    modules: dict[str, object] = {}
    missing = []
    for path in files:
        for line, module, name in _transformers_imports(path):
            if module not in modules:
                if len(modules) >= _MAX_MODULES:
                    continue
                try:
                    modules[module] = importlib.import_module(module)
                except (ImportError, RuntimeError):  # RuntimeError: transformers' lazy module on a missing extra
                    modules[module] = None
            mod = modules[module]
            if mod is None:
                missing.append((f"{path.name}:{line}", f"module {module}"))
            elif name is not None and not _has(mod, name):
                missing.append((f"{path.name}:{line}", f"{name} (from {module})"))
    return missing


def _missing_cache_methods(files: list[Path]) -> list[tuple[str, str]]:
    from transformers import DynamicCache

    found = []
    for path in files:
        for i, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in _CACHE_USES.finditer(text):
                if not hasattr(DynamicCache, m.group(1)):
                    found.append((f"{path.name}:{i}", m.group(1)))
    return found


@check("MM070", "the checkpoint's own code (trust_remote_code) runs on the installed transformers", fast=True)
def remote_code_fits_transformers(ctx):
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cfg = ctx.need("cfg")
    raw, path = raw_config(cfg)
    if not raw or not raw.get("auto_map") or not cfg.model.trust_remote_code:
        return  # no code of its own, or not allowed to run (MM044 says so when it is needed)
    here, saved = transformers.__version__, raw.get("transformers_version", "?")
    mt = raw.get("model_type")
    if mt in CONFIG_MAPPING:
        yield warning(f"{path}: model_type {mt!r} is built into transformers {here}, but the checkpoint ships its own "
                      f"code (auto_map, written for transformers {saved}) and model.trust_remote_code=true makes "
                      "transformers run that copy instead of its maintained implementation", where="model.trust_remote_code",
                      fix="model.trust_remote_code=false   (transformers' own implementation of the same weights)")
        return
    files = _code_files(model_dir(cfg))
    if not files:
        return  # auto_map names another repository's code: nothing on disk to read here
    missing = _missing_imports(files)
    if missing:
        shown = "; ".join(f"{w}: {what}" for w, what in missing[:4])
        yield error(f"the checkpoint's code imports {len(missing)} name(s) transformers {here} does not have "
                    f"(written for {saved}): {shown}; loading stops with ImportError (\"cannot import name ...\")",
                    where="model.name",
                    fix=f"a transformers-format checkpoint of the model (look for an -hf repository), or the model's code "
                        f"updated for transformers {here.split('.')[0]}.x")
    cache = _missing_cache_methods(files)
    if cache:
        shown = "; ".join(f"{w}: .{name}" for w, name in cache[:4])
        yield warning(f"the checkpoint's code calls {len(cache)} cache method(s) transformers {here}'s DynamicCache does "
                      f"not have (written for {saved}): {shown}; generation (evaluation, chat) stops with \"'DynamicCache' "
                      "object has no attribute ...\"", where="model.name",
                      fix="a transformers-format checkpoint of the model, or eval.generate=false until its code is updated")
