"""Alpaca-style records mapped through data.format=vqa with a literal `<image>` in the text (issue 14):
the tag places the image (never trained on as text), and the doctor flags a tag count that does not match."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def alpaca(tmp_path):
    from PIL import Image

    Image.new("RGB", (56, 56), "white").save(tmp_path / "a.png")

    def write(rows):
        with open(tmp_path / "train.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        return str(tmp_path / "train.jsonl")

    return write


def _tree(path):
    return {"model": {"name": "tiny/qwen2-vl"},
            "data": {"train": path, "format": "vqa", "columns": {"question": "instruction", "answer": "output",
                                                                  "image": "images"}}}


def test_one_tag_one_image_is_clean_and_not_trained_as_text(doctor, alpaca):
    from mmtune.data.encode import Encoder
    from mmtune.data.sources import load_records
    from mmtune.resolve import resolve_here

    path = alpaca([{"instruction": "Look: <image> how many?", "output": "3", "images": ["a.png"]}] * 2)
    rep = doctor(_tree(path), "MM014", "MM016", "MM017", "MM018")
    assert [f for f in rep.findings if f.severity != "info"] == [], rep.findings
    from mmtune.config.loader import validate

    cfg = validate({**_tree(path), "output_dir": "unused"})
    rec = load_records(path, cfg.data, split="train").records[0]
    text = Encoder.for_run(resolve_here(cfg)).rendered(rec)
    assert "<image>" not in text.replace("<|image_pad|>", "")


def test_tag_count_that_does_not_match_the_images_is_flagged(doctor, alpaca):
    path = alpaca([{"instruction": "<image><image> which?", "output": "a", "images": ["a.png"]}])
    rep = doctor(_tree(path), "MM014", "MM016")
    assert rep.codes("error") == {"MM016"}, rep.findings
    assert rep.errors[0].where.startswith(f"{path}:1")
