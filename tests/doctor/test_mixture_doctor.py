"""The doctor scans a mixture source by source (each with its own format) through a LLaVA-family
processor, on the seed 002 recipe's look-alike data: no crash, no error, one length report per source."""

from __future__ import annotations

import json
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "seed002_docvqa_mixture_8gpu.yaml"


def test_seed002_mixture_passes_the_doctor_through_its_tiny_twin(tmp_path, monkeypatch):
    from mmtune.doctor.registry import all_checks
    from mmtune.doctor.runner import run_doctor

    monkeypatch.chdir(RECIPE.parents[1])
    codes = [c.code for c in all_checks() if c.code not in ("MM001", "MM003")]
    rep = run_doctor(RECIPE, [f"output_dir={tmp_path / 'run'}", "model.name=tiny/llava-onevision",
                              "data.mixture_size=16"], "a100-40gb", max_records=50, only=codes)
    assert not any(f.code == "MM099" for f in rep.findings), [f.message for f in rep.findings if f.code == "MM099"]
    assert rep.errors == []
    lengths = [f for f in rep.findings if f.code == "MM017"]
    for name in ("train_human.json", "infographicsVQA_train_v1.0.json", "dataset.json"):
        assert any(name in f.message for f in lengths), [f.message for f in lengths]


def test_ocrvqa_splits_are_scanned_as_training_reads_them(tmp_path):
    """OCR-VQA's dataset.json marks each image's split (1 train, 2 val): the scan reads each split's own
    entries (as load_source does), so eval is not reported as a copy of train (MM061)."""
    import yaml
    from PIL import Image

    from mmtune.doctor.runner import run_doctor

    (tmp_path / "images").mkdir()
    entries = {}
    for i in range(4):
        Image.new("RGB", (56, 56), (50 * i, 0, 0)).save(tmp_path / "images" / f"b{i}.jpg")
        entries[f"b{i}"] = {"imageURL": f"http://x/b{i}.jpg", "questions": ["Who wrote this book?"],
                            "answers": [f"author {i}"], "title": f"t{i}", "genre": "g", "split": 1 if i < 3 else 2}
    (tmp_path / "dataset.json").write_text(json.dumps(entries))
    tree = {"model": {"name": "tiny/qwen2-vl"}, "output_dir": str(tmp_path / "run"),
            "data": {"train": str(tmp_path / "dataset.json"), "eval": str(tmp_path / "dataset.json"), "format": "ocrvqa"}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(tree))
    rep = run_doctor(tmp_path / "c.yaml", [], only=["MM014", "MM018", "MM061"])
    assert rep.errors == [] and "MM061" not in rep.codes(), rep.findings
    rows = {s.split: s.ok for s in rep.tables["data"].splits}
    assert rows == {"train": 3, "eval": 1}
