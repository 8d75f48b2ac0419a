"""Public bug reports, batch 36: LLaVA-NeXT / LLaVA-OneVision anyres tiles, image_sizes, image_newline and the
token budget (docs/doctor.md, batch 36). Rebuilt on the tiny twins: images of four aspect ratios in one micro-batch,
trained two steps through the real loop, exported with and without --merge, and run through the doctor's MM017."""

import json

import pytest
import torch
import yaml
from PIL import Image

from tests.doctor.doctor_helpers import context_for, run_codes

SIZES = [(64, 48), (90, 300), (300, 60), (50, 50)]  # (width, height): wide, tall, very wide, square


def _data(tmp_path) -> str:
    rows = []
    for i, (w, h) in enumerate(SIZES):
        img = tmp_path / f"img{i}.png"
        Image.new("RGB", (w, h), (40 * i, 100, 200)).save(img)
        rows.append({"messages": [
            {"role": "user", "content": [{"type": "image", "path": str(img)}, {"type": "text", "text": "What colour?"}]},
            {"role": "assistant", "content": "blue"}]})
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _config(tmp_path, tiny="tiny/llava-next", **adapter):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"),
        "model": {"name": tiny},
        "data": {"train": _data(tmp_path), "max_length": 2048},
        "adapter": {"method": "lora", "r": 4, "dropout": 0.0, **adapter},
        "train": {"max_steps": 2, "micro_batch_size": 4, "lr": 5e-2, "precision": "fp32", "device": "cpu",
                  "scheduler": "constant", "seed": 0},
        "logging": {"tensorboard": False},
    }))
    return cfg


# https://github.com/LLaVA-VL/LLaVA-NeXT/issues/253, https://github.com/chuangchuangtan/LLaVA-NeXT-Image-Llama3-Lora/issues/1:
# a LoRA-tuned LLaVA-NeXT / OneVision merged back gives other answers than the trained run. LLaVA-NeXT's
# `image_newline` (the learned separator after each row of tile features) is an nn.Parameter of the model itself:
# with the projector in adapter.train_components it stayed frozen (peft's modules_to_save copies modules only), so a
# composed model's random separator was never trained. Now it trains, and export --merge writes the trained value.
# Also pinned (transformers#29832, #29835, trl#1785, LlamaFactory#7102): four aspect ratios in one micro-batch, each
# image's own `image_sizes` and tile count, two real steps.
def test_image_newline_trains_with_the_projector_and_reaches_the_merged_model(tmp_path):
    from safetensors.torch import load_file

    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.export import export
    from mmtune.models.tiny import build_tiny
    from mmtune.train.loop import train

    run = build_run(load_config(_config(tmp_path, train_components=["projector"]), []))
    batch = run.collator([run.encoder.encode(r) for r in run.train_set.records])
    assert batch["image_sizes"].tolist() == [[h, w] for w, h in SIZES]  # (height, width) of each file
    assert batch["pixel_values"].shape[0] == 4 and batch["pixel_values"].dim() == 5  # images x views x C x H x W
    train(run)

    base, _ = build_tiny("tiny/llava-next")
    ckpt = tmp_path / "run" / "checkpoint-2"
    saved = load_file(str(ckpt / "trainable.safetensors"))
    assert "base_model.model.model.image_newline" in saved, sorted(k for k in saved if "lora" not in k)
    trained = saved["base_model.model.model.image_newline"]
    assert not torch.equal(trained, base.model.image_newline.detach())

    merged = load_file(str(export(ckpt, merge=True) / "model.safetensors"))
    newline = next(v for k, v in merged.items() if k.endswith("image_newline"))
    torch.testing.assert_close(newline, trained)
    tower = {k: v for k, v in base.state_dict().items() if ".vision_tower." in k}
    got = {k.replace("vision_tower", "model.vision_tower", 1) if not k.startswith("model.") else k: v
           for k, v in merged.items() if "vision_tower" in k}
    assert tower and all(torch.equal(got[k], v) for k, v in tower.items())  # the merge leaves the tower alone

    marker = json.loads((export(ckpt) / ".mmtune-export.json").read_text())
    assert any("model.image_newline" in n and "--merge" in n for n in marker["notes"]), marker["notes"]


# https://github.com/NielsRogge/Transformers-Tutorials/issues/492, https://github.com/huggingface/transformers/issues/29832:
# an anyres image's token count follows its aspect ratio (tokens: 251, features 2160 after MAX_LENGTH cut them).
# The resolved run said "image size: 56x56 (fixed by the processor (every image resized))" for LLaVA-NeXT and
# OneVision; it now names the tiles and the most a picture can take.
@pytest.mark.parametrize("tiny", ["tiny/llava-next", "tiny/llava-onevision"])
def test_anyres_processors_are_recorded_as_tiles(tiny, tmp_path):
    from mmtune.config import load_config
    from mmtune.resolve import local_target, resolve_run

    resolved = resolve_run(load_config(_config(tmp_path, tiny), []), local_target("cpu"), for_training=True)
    lines = [d.line() for d in resolved.decisions if d.key.startswith("image")]
    assert lines and lines[0].startswith("image tiles:") and "up to 5 a picture" in lines[0], lines


def test_anyres_token_counts_follow_the_aspect_ratio_and_a_short_max_length_is_refused(tmp_path):
    ctx = context_for(tmp_path, {"model": {"name": "tiny/llava-next"},
                                 "data": {"train": _data(tmp_path), "max_length": 60}})
    found = [f for f in run_codes(ctx, "MM017").findings if f.code == "MM017" and f.severity == "error"]
    assert len(found) == 1 and "2 of 4 records" in found[0].message and "never truncates" in found[0].message
