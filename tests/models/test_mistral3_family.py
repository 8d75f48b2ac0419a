"""Mistral 3 and Pixtral-12B (models/family/mistral3.py): how a llava config with a pixtral tower resolves, and a
run killed mid-way resuming to the same losses as a straight run, for both twins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.models.configs import embedded, hf_config
from mmtune.models.families import family_for_config, family_for_model_type
from mmtune.models.smoke_twin import smoke_twin
from mmtune.train.loop import train

DATA = Path(__file__).resolve().parents[2] / "recipes" / "data"


def test_a_pixtral_tower_picks_pixtral_and_every_other_llava_stays_llava():
    assert family_for_config(hf_config(embedded("mistral-community/pixtral-12b"))).name == "pixtral"
    assert family_for_config(hf_config(embedded("llava-hf/llava-1.5-7b-hf"))).name == "llava"
    assert family_for_config(hf_config(embedded("mistralai/Mistral-Small-3.1-24B-Instruct-2503"))).name == "mistral3"
    assert family_for_model_type("llava").name == "llava"  # no vision type known: LLaVA, as before
    assert family_for_model_type("llava", "clip_vision_model").name == "llava"
    assert family_for_model_type("llava", "pixtral").name == "pixtral"
    assert smoke_twin("mistral-community/pixtral-12b") == "tiny/pixtral"
    assert smoke_twin("mistralai/Mistral-Small-3.2-24B-Instruct-2506") == "tiny/mistral3"
    assert smoke_twin("llava-hf/llava-1.5-7b-hf") == "tiny/llava"


def _rows(folder: Path) -> list[float]:
    return [json.loads(ln)["loss"] for ln in (folder / "metrics.jsonl").read_text().splitlines()
            if ln.strip() and "loss" in json.loads(ln)]


@pytest.mark.parametrize("twin", ["tiny/mistral3", "tiny/pixtral"])
def test_a_killed_run_resumes_to_the_straight_runs_losses(twin, tmp_path):
    rows = [json.loads(ln) for ln in (DATA / "image_qa.jsonl").read_text().splitlines() if ln.strip()][:4]
    data = tmp_path / "four.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")

    def config(name: str) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({
            "output_dir": str(tmp_path / name), "model": {"name": twin},
            "data": {"train": str(data), "media_root": str(DATA), "max_length": 2048},
            "adapter": {"method": "lora", "r": 8, "dropout": 0.1},  # dropout: the RNG state must resume too
            "train": {"max_steps": 4, "save_every": 2, "micro_batch_size": 1, "grad_accum": 2, "lr": 1e-2,
                      "precision": "fp32", "device": "cpu", "seed": 0},
            "logging": {"tensorboard": False}}))
        return path

    train(build_run(load_config(config("straight"), [])))
    killed = load_config(config("killed"), [])
    assert train(build_run(killed), stop_after=2) is None
    train(build_run(load_config(config("killed"), [])))
    want = _rows(tmp_path / "straight")
    assert len(want) == 4 and _rows(tmp_path / "killed") == want


def test_a_processor_class_that_needs_missing_torchvision_is_a_clear_load_error():
    """What transformers raises for a processor class whose backend is missing (its placeholder class) becomes a
    ModelLoadError naming torchvision and the install; the doctor reports it as MM098 (a setup error)."""
    import transformers

    from mmtune.compat.pixtral import torchvision_missing
    from mmtune.errors import ModelLoadError
    from mmtune.models.processor_loading import _missing_backend

    if not torchvision_missing():
        pytest.skip("torchvision is installed: the library's PixtralProcessor is no placeholder")
    with pytest.raises(ImportError) as raised:
        transformers.PixtralProcessor()  # the placeholder AutoProcessor would reach for a folder naming it
    err = _missing_backend(raised.value, "mistral-community/pixtral-12b", "PixtralProcessor")
    assert isinstance(err, ModelLoadError)
    assert "needs torchvision, which is not installed" in err.what and "pip install torchvision" in err.fix
    other = _missing_backend(ImportError("\nFooProcessor requires the SentencePiece library but it was not found"), "m", None)
    assert "SentencePiece" in other.what and other.fix == "pip install SentencePiece"
