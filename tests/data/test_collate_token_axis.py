"""Mllama's `cross_attention_mask` is (1, tokens, images, tiles) per record: a batch of records with different
lengths and image counts must pad it (tokens like attention_mask, images/tiles with zeros) so every row sees
exactly what it sees alone."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from mmtune.build import build_run
from mmtune.config.loader import load_config
from tests.family_registry import DATA

pytestmark = pytest.mark.filterwarnings("ignore")


def _run(tmp_path, padding_side="right"):
    img = [{"type": "image", "path": "media/images/shapes_0.png"}, {"type": "image", "path": "media/images/shapes_1.png"}]
    rows = [
        {"id": "one", "messages": [{"role": "user", "content": [img[0], {"type": "text", "text": "How many?"}]},
                                   {"role": "assistant", "content": "4"}]},
        {"id": "two", "messages": [{"role": "user", "content": [*img, {"type": "text", "text":
                                   "How many green circles are there in the two pictures together?"}]},
                                   {"role": "assistant", "content": "12"}]},
    ]
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"), "model": {"name": "tiny/mllama"},
        "data": {"train": str(data), "media_root": str(DATA), "max_length": 512},
        "adapter": {"method": "lora", "r": 4, "dropout": 0.0},
        "train": {"max_steps": 1, "micro_batch_size": 2, "precision": "fp32", "device": "cpu", "seed": 0},
        "logging": {"tensorboard": False}}))
    return build_run(load_config(cfg, []), with_optimizer=False)


def test_rows_of_a_padded_batch_equal_each_record_alone(tmp_path):
    run = _run(tmp_path)
    items = [run.encoder.encode(r) for r in run.train_set.records]
    lengths = [int(it["input_ids"].shape[-1]) for it in items]
    assert len(set(lengths)) == 2 and {it["cross_attention_mask"].shape[2] for it in items} == {1, 2}
    batch = run.collator(items)
    assert tuple(batch["cross_attention_mask"].shape) == (2, max(lengths), 2, 4)
    model = run.unwrapped_model().eval()
    strip = lambda b: {k: v for k, v in b.items() if k != "labels"}  # noqa: E731
    with torch.no_grad():
        together = model(**strip(batch)).logits
        for row, (it, n) in enumerate(zip(items, lengths)):
            alone = model(**strip(run.collator([it]))).logits[0]
            torch.testing.assert_close(together[row, :n], alone, atol=1e-4, rtol=1e-4)
