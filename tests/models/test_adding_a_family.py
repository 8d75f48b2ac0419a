"""docs/internals.md "Adding a model family", kept true: the files its steps name exist, and a throwaway
family written as the steps say (one module: Family + tiny twin) is registered, resolved from its config's
model_type and from a hub-like name, picked up by the contract tests' registry, and trains."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "internals.md"


def _section() -> str:
    text = DOC.read_text()
    start = text.index("### Adding a model family")
    return text[start:text.index("\n## ", start)]


def test_the_steps_name_files_that_exist():
    sec = _section()
    for path in ("src/mmtune/models/family/", "src/mmtune/models/configs/", "tests/family_registry.py",
                 "tests/test_family_contracts.py", "tests/models/test_adding_a_family.py"):
        assert path in sec, path
        assert (ROOT / path).exists(), path
    for name in ("register(Family(", "register_tiny(TinySpec(", "families._discover()"):
        assert name in sec, name
    # every module file the note says the last family took is there
    last = re.search(r"The last family added, ([^,]+), took (\d+) new files \(`([^`]+)`", sec)
    assert last and (ROOT / "src/mmtune" / last.group(3)).is_file(), last


THROWAWAY = '''
    """A throwaway family for tests/models/test_adding_a_family.py: LLaVA's classes under a new name."""
    from mmtune.models.families import Family, register
    from mmtune.models.tiny import TinySpec, _llava_config, _llava_processor, _llava_tokenizer, register_tiny

    register(Family(
        name="throwaway", model_types=("throwaway_vlm",), model_class="LlavaForConditionalGeneration",
        processor_class="LlavaProcessor", modalities=("text", "image"),
        components={"projector": ("model.multi_modal_projector.",), "vision": ("model.vision_tower.",),
                    "decoder": ("model.language_model.",), "lm_head": ("lm_head.",)},
        tiny="tiny/throwaway", hub_pattern=r"throwaway-vlm"))
    register_tiny(TinySpec("tiny/throwaway", "throwaway", _llava_config, _llava_processor,
                           make_tokenizer=_llava_tokenizer))
'''


@pytest.fixture
def throwaway(tmp_path, monkeypatch):
    """Steps 1-2: one module defining and registering the family and its twin (written outside the source
    tree and imported, as families._discover() imports the package's modules); removed afterwards."""
    import importlib

    from mmtune.models.families import FAMILIES
    from mmtune.models.tiny import TINY

    (tmp_path / "throwaway_family.py").write_text(textwrap.dedent(THROWAWAY))
    monkeypatch.syspath_prepend(str(tmp_path))
    import throwaway_family  # noqa: F401

    yield FAMILIES["throwaway"]
    FAMILIES.pop("throwaway", None)
    TINY.pop("tiny/throwaway", None)
    sys.modules.pop("throwaway_family", None)
    if "tests.family_registry" in sys.modules:  # the contract tests' lists, back without the throwaway
        importlib.reload(sys.modules["tests.family_registry"])


def test_a_family_added_by_the_steps_is_resolved_tested_and_trains(throwaway, tmp_path):
    import importlib

    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.models.families import family_for_hub_name, family_for_model_type
    from mmtune.models.smoke_twin import smoke_twin
    from mmtune.train.loop import train

    assert family_for_model_type("throwaway_vlm") is throwaway
    assert family_for_hub_name("someone/Throwaway-VLM-7B") is throwaway
    assert smoke_twin("someone/throwaway-vlm-7b") == "tiny/throwaway"
    registry = importlib.reload(importlib.import_module("tests.family_registry"))
    assert "tiny/throwaway" in registry.TWINS and registry.MEDIA["tiny/throwaway"] == ("image",)

    rows = [json.loads(ln) for ln in (registry.DATA / "image_qa.jsonl").read_text().splitlines() if ln.strip()][:2]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"), "model": {"name": "tiny/throwaway"},
        "data": {"train": str(tmp_path / "d.jsonl"), "media_root": str(registry.DATA)},
        "adapter": {"method": "lora", "r": 8}, "logging": {"tensorboard": False},
        "train": {"max_steps": 2, "micro_batch_size": 2, "precision": "fp32", "device": "cpu"}}))
    run = build_run(load_config(cfg, []))
    assert run.resolved.family is throwaway
    train(run)
    assert (tmp_path / "run" / "checkpoint-2" / "adapter").is_dir()
