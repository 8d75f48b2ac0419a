"""The layering rule of docs/internals.md, enforced: no import cycles between mmtune's parts, no import
upward, and sideways only along the edges listed here (each with its reason)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "mmtune"

# Bottom to top. A part may import parts of its own rank or below; never above.
RANKS = {
    "errors": 0,
    "console": 1, "gpus": 1, "cores": 1, "host_memory": 1, "compat": 1, "loss": 1, "evaluate.metrics": 1, "train.schedule": 1,
    "evaluate.stops": 1,  # the token ids generation stops at: evaluation, chat, serve and the doctor's MM063 agree
    "evaluate.rewards": 1,  # GRPO's rewards are the metrics: config checks names, objectives score with them
    "aux_losses": 1,  # the auxiliary-loss registry: config checks names at load time; train and plan run them
    "config": 2,
    "models": 3, "optim": 3,
    "data": 4, "adapters": 4,
    "objectives": 4.5,  # what a step minimises (sft, dpo): resolve decides it, build / train / plan run it
    "evaluate.per_source": 4.5,  # names a mixture reports, from data/mixture.py; read by resolve
    "evaluate.best_metric": 4.5,  # which way eval.best_metric improves: resolve decides it, MM028 and the loop agree
    "frozen_eval": 4.5,  # frozen components kept in eval mode (by component, adapters); build applies it
    "stages": 4.5,  # staged unfreezing: parameters by component (adapters); build, resolve and train use it
    "resolve": 5,
    "sharding": 5.5,  # FSDP2 wrapping and state dicts: build shards the model, train's checkpoints gather it
    "media_balance": 5.5,  # extra tower rows under sharded weights: train and evaluation use it
    "rank_agreement": 5.5,  # every rank sees one output_dir and runs one config: build checks it after the group starts
    "launch_config": 5.5,  # the DeepSpeed / accelerate files of a zero2 / zero3 run: build and train use them
    "build": 6,
    "train": 7, "plan": 7, "doctor": 7, "evaluate": 7, "export": 7, "smoke": 7, "report": 7, "chat": 7, "serve": 7,
    "commands": 8,
    "cli": 9,
}
# Leaf modules inside a part, ranked on their own: pure functions that anything may use.
LEAVES = {"evaluate.metrics", "train.schedule", "evaluate.per_source", "evaluate.rewards", "evaluate.stops",
          "evaluate.best_metric"}
# Sideways imports between parts of one rank, and why each is needed. Anything else is a bug.
SIDEWAYS = {
    ("train", "evaluate"): "the loop evaluates during training",
    ("plan", "train"): "the planner runs the loop's own optimizer step and schedule on fake tensors",
    ("doctor", "plan"): "MM001/MM003 check the planned peak against the GPU",
    ("doctor", "train"): "MM020 pickles the loop's dataset as spawned workers would",
    ("export", "train"): "export reads a run's checkpoints",
    ("chat", "evaluate"): "chat answers through evaluation's generation",
    ("chat", "train"): "chat loads a run's checkpoint",
    ("chat", "export"): "chat reads a run's config as export does",
    ("report", "evaluate"): "the report reads evaluation's references",
    ("serve", "chat"): "the server loads a run as chat does (what is served is what chat answers)",
    ("serve", "evaluate"): "the server generates through evaluation's generate_batch",
    ("serve", "export"): "--backend vllm reads a run's config and its export as export writes it",
    ("serve", "train"): "--backend vllm finds a run's checkpoint as chat and export do",
    ("evaluate.rewards", "evaluate.metrics"): "GRPO's rewards are the task metrics, one registry",
    ("evaluate.best_metric", "evaluate.per_source"): "a mixture's score goes the way its sources' metrics go",
}


def _part(module: str) -> str:
    """mmtune.plan.fake -> plan; mmtune.data.cli -> cli (every cli module is the command layer)."""
    parts = module.split(".")[1:]
    if parts and parts[-1] == "cli":
        return "cli"
    if ".".join(parts[:2]) in LEAVES:
        return ".".join(parts[:2])
    return parts[0] if parts else ""


def _imports(path: Path) -> list[tuple[str, int]]:
    rel = path.relative_to(SRC.parent).with_suffix("")
    pkg = list(rel.parts[:-1]) if rel.name != "__init__" else list(rel.parts[:-1])
    if rel.name == "__init__":
        pkg = list(rel.parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - node.level + 1] if node.level > 1 else pkg
                target = ".".join(base + ([node.module] if node.module else []))
                names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
            else:
                names = [node.module or ""]
            out += [(n, node.lineno) for n in names if n.startswith("mmtune")]
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("mmtune")]
    return out


def _edges():
    for path in sorted(SRC.rglob("*.py")):
        src_mod = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        a = _part(src_mod)
        for target, line in _imports(path):
            b = _part(target)
            if b and a != b:
                yield a, b, target, f"{path.relative_to(SRC.parent.parent)}:{line}"


def test_every_part_has_a_rank():
    parts = {_part(".".join(p.relative_to(SRC.parent).with_suffix("").parts)) for p in SRC.rglob("*.py")}
    parts.discard("__init__")
    parts.discard("__main__")
    parts.discard("")
    assert parts <= set(RANKS), f"give these parts a rank in tests/test_layers.py: {sorted(parts - set(RANKS))}"


def test_no_upward_or_unlisted_sideways_import():
    bad = []
    for a, b, target, where in _edges():
        ra, rb = RANKS.get(a, 99), RANKS.get(b, 99)
        if rb > ra or (rb == ra and (a, b) not in SIDEWAYS):
            bad.append(f"{where}: {a} (rank {ra}) imports {target} (rank {rb})")
    assert not bad, "imports against the layering rule (docs/internals.md):\n" + "\n".join(bad)


def test_no_import_cycle_between_parts():
    graph: dict[str, set[str]] = {}
    for a, b, _, _ in _edges():
        graph.setdefault(a, set()).add(b)
    seen, stack, cycles = set(), [], []

    def visit(n):
        if n in stack:
            cycles.append(stack[stack.index(n):] + [n])
            return
        if n in seen:
            return
        seen.add(n)
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            visit(m)
        stack.pop()

    for n in sorted(graph):
        visit(n)
    assert not cycles, "import cycles between parts: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_rule_catches_an_upward_import(tmp_path, monkeypatch):
    """The checker itself: a train module importing doctor is reported."""
    global SRC
    fake = tmp_path / "mmtune"
    (fake / "train").mkdir(parents=True)
    (fake / "doctor").mkdir()
    (fake / "train" / "loop.py").write_text("from ..doctor import runner\n")
    (fake / "doctor" / "runner.py").write_text("")
    monkeypatch.setattr(__import__(__name__), "SRC", fake, raising=False)
    old, SRC = SRC, fake
    try:
        found = [(a, b) for a, b, _, _ in _edges()]
    finally:
        SRC = old
    assert ("train", "doctor") in found
