"""Mllama's `cross_attention_mask` is (1, tokens, images, tiles) per record: a batch of records with different
lengths and image counts pads it (tokens like attention_mask, images / tiles with zeros) exactly as
MllamaProcessor pads it when it batches the same records itself, and records of one image count come out of a
padded batch as they come out alone. (With different image counts the model itself gives a padded row other
logits than the record alone, the processor's own batch included: that is transformers' Mllama, not padding.)"""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from PIL import Image

from mmtune.build import build_run
from mmtune.config.loader import load_config
from tests.family_registry import DATA

pytestmark = pytest.mark.filterwarnings("ignore")
IMAGES = ["media/images/shapes_0.png", "media/images/shapes_1.png"]
SHORT, LONG = "How many?", "How many green circles are there in the two pictures together?"


def _messages(n_images: int, question: str, answer: str) -> list[dict]:
    parts = [{"type": "image", "path": p} for p in IMAGES[:n_images]]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": question}]},
            {"role": "assistant", "content": answer}]


def _run(tmp_path, shapes):
    rows = [{"id": f"r{i}", "messages": _messages(n, q, a)} for i, (n, q, a) in enumerate(shapes)]
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"), "model": {"name": "tiny/mllama"},
        "data": {"train": str(data), "media_root": str(DATA), "max_length": 512},
        "adapter": {"method": "lora", "r": 4, "dropout": 0.0},
        "train": {"max_steps": 1, "micro_batch_size": 2, "precision": "fp32", "device": "cpu", "seed": 0},
        "logging": {"tensorboard": False}}))
    run = build_run(load_config(cfg, []), with_optimizer=False)
    return run, [run.encoder.encode(r) for r in run.train_set.records]


def test_the_collator_pads_as_the_processor_batches(tmp_path):
    shapes = [(1, SHORT, "4"), (2, LONG, "12")]
    run, items = _run(tmp_path, shapes)
    assert len({int(it["input_ids"].shape[-1]) for it in items}) == 2
    ours = run.collator(items)
    assert run.resolved.padding_mask is False  # training batches keep their padding mask as token_mask
    ours["attention_mask"] = ours.pop("token_mask")
    proc = run.encoder.processor
    texts = [proc.apply_chat_template([{**m, "content": [{"type": c["type"], **({"text": c["text"]} if "text" in c else {})}
                                                          for c in m["content"]] if isinstance(m["content"], list)
                                        else m["content"]} for m in _messages(n, q, a)], tokenize=False)
             for n, q, a in shapes]
    images = [[Image.open(DATA / p).convert("RGB") for p in IMAGES[:n]] for n, _, _ in shapes]
    theirs = proc(text=texts, images=images, padding=True, return_tensors="pt")
    assert tuple(ours["cross_attention_mask"].shape) == (2, ours["input_ids"].shape[1], 2, 4)
    for key in ("input_ids", "attention_mask", "aspect_ratio_ids", "aspect_ratio_mask"):
        torch.testing.assert_close(ours[key], theirs[key], msg=key)
    # on real tokens; the processor also lets padding tokens see the last image (their outputs are never read)
    real = ours["attention_mask"].bool()
    torch.testing.assert_close(ours["cross_attention_mask"][real], theirs["cross_attention_mask"][real])
    torch.testing.assert_close(ours["pixel_values"], theirs["pixel_values"].to(ours["pixel_values"].dtype))


def test_rows_of_a_padded_batch_equal_each_record_alone(tmp_path):
    run, items = _run(tmp_path, [(1, SHORT, "4"), (1, LONG, "12")])
    lengths = [int(it["input_ids"].shape[-1]) for it in items]
    assert len(set(lengths)) == 2
    model = run.unwrapped_model().eval()
    from mmtune.loss import model_inputs as strip  # the loop's inputs: no labels, no token_mask
    with torch.no_grad():
        together = model(**strip(run.collator(items))).logits
        for row, (it, n) in enumerate(zip(items, lengths)):
            alone = model(**strip(run.collator([it]))).logits[0]
            torch.testing.assert_close(together[row, :n], alone, atol=1e-4, rtol=1e-4)
