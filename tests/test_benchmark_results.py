"""Every results file under benchmarks/results/ was written by its script, not by hand: it names the script
that wrote it (its file name starts with the script's name), carries the provenance that script writes
(benchmarks/_provenance.py: commit, dirty flag, command, versions, machine, threads, load average) and
the result keys the script declares (`RESULT_KEYS`). Files from before provenance existed were removed."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"


def _literal(path: Path, name: str):
    """A module-level constant of a script, read without importing it (scripts import torch)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    return None


PROVENANCE_KEYS = _literal(BENCH / "_provenance.py", "PROVENANCE_KEYS")
SCRIPTS = sorted((p for p in BENCH.glob("*.py") if not p.name.startswith("_")), key=lambda p: -len(p.stem))
FILES = sorted(p for p in RESULTS.rglob("*") if p.is_file()) if RESULTS.is_dir() else []


def _script_of(path: Path) -> Path | None:
    if path.name.startswith("gpu_"):  # benchmarks/gpu/run.py's files, written by its ResultsFile
        return BENCH / "gpu" / "results.py"
    return next((s for s in SCRIPTS if re.match(re.escape(s.stem) + r"[_.]", path.name)), None)


def _check_provenance(prov: dict, where: str) -> None:
    missing = [k for k in PROVENANCE_KEYS if k not in prov]
    assert not missing, f"{where}: no {missing} (write it with benchmarks/_provenance.py)"
    assert re.fullmatch(r"[0-9a-f]{40}", prov["commit"] or ""), f"{where}: commit {prov['commit']!r}"
    assert isinstance(prov["dirty"], bool) and prov["command"], where
    assert "start" in prov["load_average"] and "end" in prov["load_average"], where


def test_provenance_keys_are_declared():
    assert PROVENANCE_KEYS and "commit" in PROVENANCE_KEYS and "load_average" in PROVENANCE_KEYS


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_results_file_carries_its_scripts_keys(path):
    script = _script_of(path)
    assert script is not None, f"{path.name}: no benchmarks/*.py script whose name starts it"
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        _check_provenance(data, path.name)
        keys = _literal(script, "RESULT_KEYS")
        assert keys, f"{script.name} declares no RESULT_KEYS (the keys its results files carry)"
        missing = [k for k in keys if k not in data]
        assert not missing, f"{path.name}: no {missing}, which {script.name} writes"
    elif path.suffix == ".txt":
        lines = [ln for ln in path.read_text().splitlines() if ln.startswith("# provenance: ")]
        assert lines, f"{path.name}: no '# provenance: ' line (_provenance.text_header)"
        _check_provenance(json.loads(lines[0][len("# provenance: "):]), path.name)
    else:
        pytest.fail(f"{path.name}: results are .json or .txt written by a script")

