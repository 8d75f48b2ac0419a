"""The doctor scans a mixture source by source (each with its own format) through a LLaVA-family
processor, on the seed 002 recipe's look-alike data: no crash, no error, one length report per source."""

from __future__ import annotations

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
