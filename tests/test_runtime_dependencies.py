"""What mmtune needs at run time is declared: every tiny twin (processor and model, one forward) builds in a
process that can import only mmtune's declared dependencies and what they declare in turn.

Why: this machine's interpreter (and CI's) holds many packages nobody declared. SmolVLM's processor needs
`num2words`, which transformers does not require and mmtune did not declare: the suite passed here and failed
21 tests in a fresh virtual environment (benchmarks/results/first_contact_fresh_venv_tests_*_2a591f1.json).
A subprocess hides every installed package outside the declared closure from the import system (as if it were
not installed: `find_spec` answers None, so a library's optional import falls back as it would), then builds
each twin and runs a shipped video + audio recipe's smoke run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_PROG = r"""
import importlib.machinery, json, sys
blocked = set(json.loads(sys.argv[1]))  # top-level module names that only undeclared distributions provide


class Hidden(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            return None  # not installed, as far as this process can tell
        return super().find_spec(name, path, target)


sys.meta_path = [Hidden if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
sys.path_importer_cache.clear()
from mmtune.models.examples import example_batch
from mmtune.models.families import FAMILIES
from mmtune.models.tiny import build_tiny

built = []
for family in FAMILIES.values():
    if family.tiny:
        model, processor = build_tiny(family.tiny)
        model(**example_batch(processor, family.modalities))
        built.append(family.tiny)
# A shipped recipe whose records hold video and audio files, through `mmtune train --smoke` (decoding, encoding,
# the preflight, a few steps): the media readers' imports too.
from mmtune.cli import app

app(["train", "recipes/seed000_video_audio_qa.yaml", "--smoke", "output_dir=" + sys.argv[2]], standalone_mode=False)
print("BUILT " + json.dumps(built))
"""


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared_closure() -> set[str]:
    """mmtune's own requirements (read from pyproject.toml, no extras), then what each installed one requires,
    transitively, markers evaluated for this interpreter (an extra's requirement only where that extra was asked)."""
    from importlib.metadata import PackageNotFoundError, distribution

    import tomllib
    from packaging.requirements import Requirement

    todo = [(Requirement(r), ()) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    done: dict[str, set] = {}
    while todo:
        req, parent_extras = todo.pop()
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (parent_extras or ("",))):
            continue
        key = _canon(req.name)
        if key in done and set(req.extras) <= done[key]:
            continue
        done.setdefault(key, set()).update(req.extras)
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            continue  # an optional platform package this interpreter lacks
        todo += [(Requirement(r), tuple(req.extras)) for r in dist.requires or ()]
    return set(done)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_every_tiny_twin_builds_with_only_the_declared_dependencies_importable(tmp_path):
    from importlib.metadata import packages_distributions

    closure = _declared_closure()
    allowed, blocked = set(), set()
    for top, dists in packages_distributions().items():
        (allowed if any(_canon(d) in closure for d in dists) or _canon(top) == "mmtune" else blocked).add(top)
    blocked -= allowed | set(sys.stdlib_module_names)
    res = subprocess.run([sys.executable, "-c", _PROG, json.dumps(sorted(blocked)), str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert res.returncode == 0, ("a tiny twin needs a package outside mmtune's declared dependencies:\n"
                                 + res.stderr[-3000:])
    built = json.loads(res.stdout.split("BUILT ", 1)[1])
    assert "tiny/smolvlm" in built and len(built) >= 15, built
    assert (tmp_path / "run-smoke" / "summary.json").is_file()  # the smoke run went to its end
