"""The doctor never raises, on a few representative combos of benchmarks/doctor_crash_sweep.py (the whole
sweep, every shipped recipe x adapter x precision x strategy x data modality, is the benchmark's: ~65 runs).

Chosen for reach: an audio model on video+audio data under QLoRA + fp16 + ZeRO-3, a LLaVA-NeXT trained in
full under FSDP on audio it cannot take, the tiny demo under QLoRA on text, the Omni recipe as shipped and the
8-GPU mixture recipe on image data (its eval metric set back to eval_loss)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "doctor_crash_sweep.py"


def _sweep():
    spec = importlib.util.spec_from_file_location("doctor_crash_sweep", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["doctor_crash_sweep"] = mod  # dataclasses resolve their module by name
    spec.loader.exec_module(mod)
    return mod


SWEEP = _sweep()
COMBOS = [
    SWEEP.Combo("recipes/qwen2_audio_7b_lora.yaml", "qlora", "fp16", "zero3", "video+audio"),
    SWEEP.Combo("recipes/llava_next_7b_qlora.yaml", "full", "bf16", "fsdp", "audio"),
    SWEEP.Combo("recipes/demo_counting.yaml", "qlora", "fp16", "ddp", "text"),
    SWEEP.Combo("recipes/seed000_video_audio_qa.yaml"),
    SWEEP.Combo("recipes/seed002_docvqa_mixture_8gpu.yaml", "lora", "fp16", "ddp", "image"),
]


def test_the_sweep_covers_every_axis_value_for_every_recipe():
    combos = SWEEP.combos()
    for recipe in SWEEP.recipes():
        mine = [c for c in combos if c.recipe == recipe]
        assert mine[0] == SWEEP.Combo(recipe)  # as shipped first
        assert {c.modality for c in mine[1:]} == set(SWEEP.MODALITIES)
        assert {c.strategy for c in mine[1:]} == set(SWEEP.STRATEGIES)
        assert {c.precision for c in mine[1:]} == set(SWEEP.PRECISIONS)
    assert len(combos) == len(set(combos))


@pytest.mark.parametrize("combo", COMBOS, ids=[c.label for c in COMBOS])
def test_doctor_never_raises(combo, monkeypatch):
    monkeypatch.chdir(SWEEP.ROOT)
    [result] = SWEEP.sweep([combo], progress=None)
    assert result["problem"] is None, result["problem"]
    assert "MM019" not in result["errors"]  # the variant is a valid config: the checks behind it ran
