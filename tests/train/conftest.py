"""A small real-format dataset (JSONL + PNG images) for loop tests on tiny models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def config_only_folder(folder: Path, *, layers: int | None = 3, vocab_size: int | None = None,
                       weights_stub: bool = False) -> Path:
    """A tiny Qwen2's model folder with config.json and the tokenizer but no weights (what a user has with only
    the config): `layers` decoder layers, `vocab_size` if given; `weights_stub` adds an empty
    model.safetensors for code that wants a weights file to exist (never read)."""
    from mmtune.models.tiny import tiny_config_and_processor

    config, processor = tiny_config_and_processor("tiny/qwen2")
    if layers is not None:
        config.num_hidden_layers = layers
        config.layer_types = [config.layer_types[0]] * layers
    if vocab_size is not None:
        config.vocab_size = vocab_size
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)
    processor.save_pretrained(folder)
    if weights_stub:
        (folder / "model.safetensors").write_bytes(b"")
    return folder


def make_dataset(folder: Path, n: int, seed: int = 0) -> Path:
    import random

    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        img = Image.new("RGB", (64 + 8 * (i % 3), 64), (rng.randrange(256), 200, 100))
        k = rng.randint(1, 4)
        d = ImageDraw.Draw(img)
        for j in range(k):
            d.ellipse([4 + 14 * j, 20, 14 + 14 * j, 30], fill=(0, 0, 0))
        img.save(folder / f"img{i}.png")
        q = "How many circles are there?" + (" Answer with a number." if i % 2 else "")
        rows.append({"messages": [
            {"role": "user", "content": [{"type": "image", "path": f"img{i}.png"}, {"type": "text", "text": q}]},
            {"role": "assistant", "content": str(k) if i % 3 else f"{k} circles"}]})
    path = folder / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture
def tiny_vl_config(tmp_path):
    """A config writer: tiny Qwen2-VL, LoRA, a 12-record image dataset, fp32 on CPU."""
    data = make_dataset(tmp_path / "data", 12)

    def write(**sections) -> Path:
        import yaml

        cfg = {
            "output_dir": str(tmp_path / "run"),
            "model": {"name": "tiny/qwen2-vl", "gradient_checkpointing": False},
            "data": {"train": str(data), "eval": str(data), "max_length": 256, "eval_max_samples": 4},
            "adapter": {"method": "lora", "r": 4, "dropout": 0.0},
            "train": {"max_steps": 4, "micro_batch_size": 2, "grad_accum": 2, "lr": 1e-3, "precision": "fp32",
                      "device": "cpu", "warmup_steps": 1, "seed": 0},
            "eval": {"every": None, "metrics": ["exact_match"], "max_new_tokens": 3, "batch_size": 2},
            "logging": {"tensorboard": False},
        }
        for k, v in sections.items():
            if isinstance(v, dict):
                cfg.setdefault(k, {}).update(v)
            else:
                cfg[k] = v
        p = tmp_path / "cfg.yaml"
        p.write_text(yaml.safe_dump(cfg))
        return p

    return write
