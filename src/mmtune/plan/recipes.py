"""The GPUs a shipped recipe names, to plan it on each: its `train.gpu`, and every
`mmtune plan recipes/NAME.yaml [key=value ...] --gpu GPU [--gpus N] [--nodes M] [--strategy S]` line of its header
comment (a recipe's promise: tests/plan/test_recipes_fit.py holds it to it, benchmarks/recipes_fit.py measures it).
A model whose weights fit no one GPU (GLM-4.5V: 200.6 GiB) promises a sharded run: its GPU count is part of the plan."""

from __future__ import annotations

import re
import shlex
from pathlib import Path


def named_plans(path: Path) -> list[tuple[tuple[str, ...], str, int, int]]:
    """[(overrides, GPU id, GPUs per node, nodes)] for the recipe at `path`, sorted, without repeats. `--strategy S`
    becomes the override `train.strategy=S`, as `mmtune plan` makes it."""
    import yaml

    text = path.read_text(encoding="utf-8")
    gpu = ((yaml.safe_load(text) or {}).get("train") or {}).get("gpu")
    plans = {((), gpu, 1, 1)} if gpu else set()
    for line in re.findall(r"^#\s+mmtune plan\s+(\S+\.yaml\b[^#\n]*)", text, flags=re.M):
        words = shlex.split(line)
        if Path(words[0]).stem != path.stem or "--gpu" not in words[:-1]:
            continue
        overrides = [w for w in words[1:] if "=" in w and not w.startswith("-")]
        if "--strategy" in words[:-1]:
            overrides.append(f"train.strategy={_flag(words, '--strategy', '')}")
        plans.add((tuple(overrides), _flag(words, "--gpu", ""), int(_flag(words, "--gpus", "1")),
                   int(_flag(words, "--nodes", "1"))))
    return sorted(plans)


def _flag(words: list[str], name: str, default: str) -> str:
    """The value after `name` on a command line, or `default`."""
    return words[words.index(name) + 1] if name in words[:-1] else default
