"""The doctor never raises, on a few representative combos of benchmarks/doctor_crash_sweep.py (the whole
sweep, every shipped recipe x adapter x precision x strategy x data modality, is the benchmark's: ~65 runs).

Chosen for reach: an audio model on video+audio data under QLoRA + fp16 + ZeRO-3 + FlashAttention-2, a
LLaVA-NeXT trained in full under FSDP on audio it cannot take, the tiny demo (built for real) with LoRA and
FlashAttention-2 planned for the A100 (flash_attn is not installed here: every model check crashed on it
before), the Omni recipe as shipped and the 8-GPU mixture recipe on image data (its eval metric set back to
eval_loss)."""

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
    SWEEP.Combo("recipes/qwen2_audio_7b_lora.yaml", "qlora", "fp16", "zero3", "video+audio", "flash_attention_2"),
    SWEEP.Combo("recipes/llava_next_7b_qlora.yaml", "full", "bf16", "fsdp", "audio", "sdpa"),
    SWEEP.Combo("recipes/demo_counting.yaml", "lora", "bf16", "ddp", "text", "flash_attention_2"),
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
        assert {c.attention for c in mine[1:]} == set(SWEEP.ATTENTION)
    assert len(combos) == len(set(combos))


@pytest.mark.parametrize("combo", COMBOS, ids=[c.label for c in COMBOS])
def test_doctor_never_raises(combo, monkeypatch):
    monkeypatch.chdir(SWEEP.ROOT)
    [result] = SWEEP.sweep([combo], progress=None)
    assert result["problem"] is None, result["problem"]
    assert "MM019" not in result["errors"]  # the variant is a valid config: the checks behind it ran


def _folder(root: Path, kind: str) -> Path:
    """A tiny Qwen2-VL model folder broken one way (what exports, clones and stopped downloads leave)."""
    import json

    import torch
    from safetensors.torch import save_file

    from mmtune.models.tiny import tiny_config_and_processor

    config, proc = tiny_config_and_processor("tiny/qwen2-vl")
    folder = root / kind
    folder.mkdir()
    if kind == "no_template":
        proc.chat_template = proc.tokenizer.chat_template = None
    config.save_pretrained(folder)
    proc.save_pretrained(folder)
    save_file({"lm_head.weight": torch.zeros(2, 2)}, str(folder / "model.safetensors"))
    weights = folder / "model.safetensors"
    if kind == "cut_short":
        weights.write_bytes(weights.read_bytes()[:40])
    elif kind == "lfs_pointer":
        weights.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 1\n")
    elif kind == "bad_json":
        (folder / "config.json").write_text("{not json")
    elif kind == "custom_code":
        raw = json.loads((folder / "config.json").read_text())
        raw.update(model_type="internvl_chat", auto_map={"AutoConfig": "configuration_internvl_chat.X"})
        (folder / "config.json").write_text(json.dumps(raw))
    elif kind == "empty":
        for p in folder.iterdir():
            p.unlink()
    return folder


@pytest.mark.parametrize("kind", ["no_template", "cut_short", "lfs_pointer", "bad_json", "custom_code", "empty"])
def test_doctor_never_raises_on_a_broken_model_folder(kind, tmp_path):
    """Each of these once ended a check in MM099 (a crash) or could: the whole doctor reports them as findings."""
    from mmtune.doctor.runner import INTERNAL_ERROR, run_doctor

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"model:\n  name: {_folder(tmp_path, kind)}\ndata:\n  train: synthetic:counting\n"
                   f"  synthetic_train_size: 4\noutput_dir: {tmp_path / 'run'}\n")
    rep = run_doctor(cfg, [], None, max_records=4)
    assert not [f for f in rep.findings if f.code == INTERNAL_ERROR], rep.findings
    assert rep.errors  # each is broken: something says so
