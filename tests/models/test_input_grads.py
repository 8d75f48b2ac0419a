"""Frozen vision tower + LoRA + gradient checkpointing: only the text embeddings' output requires grad.

transformers 5 (and peft through it) hooks every sub-model's input embeddings, a vision tower's patch
embedding too, so a frozen tower was recorded by autograd and its activations kept for nothing (models/
checkpointing.text_input_grads_only). The gradients of what trains must not change."""

from __future__ import annotations

import pytest
import torch
import yaml

from mmtune.build import build_run
from mmtune.config.loader import load_config
from tests.family_registry import DATA

pytestmark = pytest.mark.filterwarnings("ignore")


def _run(tmp_path, twin):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"), "model": {"name": twin, "gradient_checkpointing": True},
        "data": {"train": str(DATA / "image_qa.jsonl"), "media_root": str(DATA)},
        "adapter": {"method": "lora", "r": 4, "dropout": 0.0, "freeze_components": ["vision"]},
        "train": {"max_steps": 1, "micro_batch_size": 1, "precision": "fp32", "device": "cpu", "seed": 0},
        "logging": {"tensorboard": False}}))
    return build_run(load_config(cfg, []), with_optimizer=False)


def _step(model, batch, vision):
    seen = {}

    def keep(module, args, out):
        seen["out"] = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0] if isinstance(out, tuple) else out

    hook = vision.register_forward_hook(keep)
    model.zero_grad()
    model(**batch).loss.backward()
    hook.remove()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return seen["out"].requires_grad, grads


@pytest.mark.parametrize("twin", ["tiny/qwen2-vl", "tiny/mllama"])
def test_frozen_tower_is_not_recorded_and_trained_grads_are_unchanged(tmp_path, twin):
    run = _run(tmp_path, twin)
    model = run.unwrapped_model()
    base = model.get_base_model()
    vision = next(m for n, m in base.named_modules() if n.endswith(("visual", "vision_model")))
    batch = run.collator([run.encoder.encode(run.train_set.records[0])])
    recorded, grads = _step(model, batch, vision)
    assert not recorded
    assert grads and all("lora_" in n and "vision" not in n and "visual" not in n for n in grads)
    base.enable_input_require_grads()  # transformers' hooks back: the tower is recorded, the same grads come out
    recorded_again, grads_again = _step(model, batch, vision)
    assert recorded_again
    assert grads.keys() == grads_again.keys()
    for n in grads:
        torch.testing.assert_close(grads[n], grads_again[n], rtol=1e-5, atol=1e-7)
