"""Day 0: a model type the registry does not list, which transformers loads as AutoModelForImageTextToText,
trains with a family inferred from the model (models/generic.py); the inferences are decisions with reasons,
and the doctor says which checks cannot apply."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from day0_model import save_day0_model  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "recipes" / "data"


@pytest.fixture(scope="module")
def day0_folder(tmp_path_factory):
    """An Idefics3 model folder, with the registry as it was before Idefics3 became a family: the day-0 path
    must serve any type the registry lacks, and Idefics3 is one whose every inference is checked below."""
    from mmtune.models.families import FAMILIES

    folder = save_day0_model(tmp_path_factory.mktemp("day0") / "model")
    model_type = json.loads((folder / "config.json").read_text())["model_type"]
    with pytest.MonkeyPatch.context() as mp:
        for name in [n for n, f in FAMILIES.items() if model_type in f.model_types]:
            mp.delitem(FAMILIES, name)
        assert all(model_type not in f.model_types for f in FAMILIES.values()), "pick a type the registry lacks"
        yield folder


def _cfg(folder: Path, tmp_path: Path) -> Path:
    rows = [json.loads(ln) for ln in (DATA / "image_qa.jsonl").read_text().splitlines() if ln.strip()][:2]
    (tmp_path / "fixed.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"), "model": {"name": str(folder)},
        "data": {"train": str(tmp_path / "fixed.jsonl"), "media_root": str(DATA)},
        "adapter": {"method": "lora", "r": 8, "dropout": 0.0},
        "train": {"max_steps": 10, "micro_batch_size": 2, "lr": 1e-2, "precision": "fp32", "device": "cpu",
                  "scheduler": "constant", "seed": 0},
        "logging": {"tensorboard": False}}))
    return path


def test_unlisted_image_text_model_trains_with_an_inferred_family(day0_folder, tmp_path):
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    run = build_run(load_config(_cfg(day0_folder, tmp_path), []))
    fam = run.resolved.family
    assert fam.inferred and fam.name == "generic:idefics3"
    assert fam.components == {"decoder": ("model.text_model.",), "vision": ("model.vision_model.",),
                              "projector": ("model.connector.",), "lm_head": ("lm_head.",)}
    lines = run.resolved.summary_lines()
    assert any(ln.startswith("model.family: generic:idefics3 (day-0") for ln in lines), lines
    assert any(ln.startswith("model.family.decoder: model.text_model. (the module get_decoder() returns)")
               for ln in lines), lines
    # LoRA lands on the decoder only (the inferred component table decides, as for a registered family)
    lora = [n for n, p in run.unwrapped_model().named_parameters() if p.requires_grad]
    assert lora and all(".text_model." in n and "lora_" in n for n in lora)
    train(run)
    losses = [json.loads(ln)["loss"] for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(x == x for x in losses) and sum(losses[-3:]) / 3 < 0.9 * losses[0], losses


def test_doctor_says_what_was_inferred_and_what_cannot_apply(day0_folder, tmp_path):
    from mmtune.doctor.runner import run_doctor

    rep = run_doctor(_cfg(day0_folder, tmp_path), [], None, only=["MM095"])
    (f,) = [f for f in rep.findings if f.code == "MM095"]
    assert f.severity == "info"
    assert "generic:idefics3 is a day-0 family" in f.message and "vision=model.vision_model." in f.message
    assert "MM041" in f.message and "data.packing" in f.message
    assert "MM066" not in f.message  # video time positions: Idefics3 takes no video (its config names no video token)


def test_an_unknown_type_transformers_cannot_load_as_image_text_is_still_an_error():
    from transformers import Qwen2Config

    from mmtune.errors import ModelLoadError
    from mmtune.models.families import family_for_config

    cfg = Qwen2Config()
    cfg.model_type = "no_such_model"
    with pytest.raises(ModelLoadError, match="not a family mmtune knows"):
        family_for_config(cfg)
