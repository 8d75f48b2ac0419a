"""Split names, decided once: which file or folder entry holds `train` / `eval` (under the aliases of
config/aliases.py: eval -> validation, val, valid, dev, eval; never test), and a split-alias sibling of a
file that does not exist (ChartQA publishes `val`, users write `validation`)."""

from __future__ import annotations

import json
from pathlib import Path

from ..config.aliases import SPLIT_ALIASES
from ..errors import DataError

FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")



def split_candidates(split: str) -> tuple[str, ...]:
    return SPLIT_ALIASES.get(split, (split,))


def split_alias_of(p: Path) -> Path | None:
    """An existing sibling whose name differs only by a split alias (`.../validation.jsonl` asked,
    `.../val.jsonl` there), or None."""
    suffix = p.suffix if p.suffix in FILE_SUFFIXES + (".arrow",) else ""
    stem = p.name[: len(p.name) - len(suffix)]
    for group in (SPLIT_ALIASES["train"], SPLIT_ALIASES["eval"], SPLIT_ALIASES["test"]):
        for name in group:
            if stem == name or stem.endswith(("_" + name, "-" + name, "." + name)):
                head = stem[: len(stem) - len(name)]
                for alias in group:
                    cand = p.with_name(head + alias + suffix)
                    if alias != name and cand.exists():
                        return cand
    return None


def resolve_split(spec: str, split: str) -> tuple[str, str | None]:
    """What `data.train` / `data.eval` will read, decided once: (spec, note or None).

    A folder becomes `FOLDER::NAME` with the split found under its aliases (eval -> validation, val,
    valid, dev, eval; never test); a file that does not exist but whose split-alias sibling does is replaced
    by it (ChartQA publishes `val`, users write `validation`). Anything else is returned unchanged and
    fails, with its reason, when read."""
    if spec.startswith("synthetic:") or "::" in spec:
        return spec, None
    path = Path(spec).expanduser()
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
            names = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
        elif (path / "state.json").is_file():
            return spec, None  # a single saved Dataset: no splits
        else:
            names = sorted(p.stem for p in path.iterdir() if p.suffix in FILE_SUFFIXES)
        name = next((n for n in split_candidates(split) if n in names), None)
        if name is None:
            return spec, None
        return f"{spec}::{name}", f"split {name!r} of the folder (splits: {', '.join(names)})"
    if not path.exists():
        alias = split_alias_of(path)
        if alias is not None:
            return str(alias), f"{spec} does not exist; its split alias {alias.name} does (failure mode 15)"
    return spec, None


def pick_split(available: list[str], split: str, where: str) -> str:
    for name in split_candidates(split):
        if name in available:
            return name
    raise DataError(f"{where} has no {split!r} split", where=where,
                    fix=f"splits found: {', '.join(available) or '(none)'}; point data.train/data.eval at one of "
                        f"them or name the split explicitly as PATH::SPLIT")
