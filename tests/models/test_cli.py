"""`mmtune download` offline error path and `mmtune compose` from local part folders."""

from __future__ import annotations

import torch
from typer.testing import CliRunner

from mmtune.cli import app


def test_download_offline_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    r = CliRunner().invoke(app, ["download", "Qwen/Qwen2-VL-7B-Instruct", "--cache", str(tmp_path)])
    assert r.exit_code == 2
    assert "cannot download Qwen/Qwen2-VL-7B-Instruct" in r.output and "network" in r.output
    assert "Traceback" not in r.output


def test_compose_command_writes_a_loadable_llava_folder(tmp_path):
    from transformers import CLIPVisionConfig, CLIPVisionModel
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    from mmtune.build import load_model
    from mmtune.config.schema import RunConfig
    from mmtune.models.examples import example_batch
    from mmtune.models.tiny import build_tiny

    clip = CLIPVisionModel(CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=2, image_size=56, patch_size=14))
    clip.save_pretrained(tmp_path / "clip")
    CLIPImageProcessorPil(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56}).save_pretrained(
        tmp_path / "clip")
    lm, tok = build_tiny("tiny/qwen2")
    lm.save_pretrained(tmp_path / "lm")
    tok.save_pretrained(tmp_path / "lm")
    r = CliRunner().invoke(app, ["compose", "--vision", str(tmp_path / "clip"), "--lm", str(tmp_path / "lm"),
                                 "--out", str(tmp_path / "llava")])
    assert r.exit_code == 0, r.output
    loaded = load_model(RunConfig(model={"name": str(tmp_path / "llava")}), device="cpu", dtype="fp32")
    assert loaded.family.name == "llava"
    batch = example_batch(loaded.processor, ("image",))
    assert torch.isfinite(loaded.model(**batch).loss)
