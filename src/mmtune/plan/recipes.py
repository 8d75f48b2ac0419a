"""The GPUs a shipped recipe names, to plan it on each: its `train.gpu`, and every
`mmtune plan recipes/NAME.yaml [key=value ...] --gpu GPU` line of its header comment (a recipe's promise:
tests/plan/test_recipes_fit.py holds it to it, benchmarks/recipes_fit.py measures it)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path


def named_plans(path: Path) -> list[tuple[tuple[str, ...], str]]:
    """[(overrides, GPU id)] for the recipe at `path`, sorted, without repeats."""
    import yaml

    text = path.read_text(encoding="utf-8")
    gpu = ((yaml.safe_load(text) or {}).get("train") or {}).get("gpu")
    plans = {((), gpu)} if gpu else set()
    for line in re.findall(r"^#\s+mmtune plan\s+(\S+\.yaml\b[^#\n]*)", text, flags=re.M):
        words = shlex.split(line)
        if Path(words[0]).stem != path.stem or "--gpu" not in words[:-1]:
            continue
        gpu_at = words.index("--gpu") + 1
        plans.add((tuple(w for w in words[1:] if "=" in w and not w.startswith("-")), words[gpu_at]))
    return sorted(plans)
