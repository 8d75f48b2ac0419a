"""Phi-4-multimodal's own facts, beyond the registry's contract tests: the torch-only image processor's token
count is the model's, variable-length audio batches through the lone-clip frame mask, a saved processor reloads
without torchvision, LoRA lands on the fused decoder linears, and a run with audio and images resumes bit-identically
(the audio encoder draws from numpy's global RNG while training)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from mmtune.models.family.phi4_multimodal import FAMILY, LORA_TARGETS
from mmtune.models.phi4mm_images import Phi4MMImageProcessorTorch
from mmtune.models.tiny import build_tiny

DATA = Path(__file__).resolve().parents[2] / "recipes" / "data"


def test_full_size_token_count_is_transformers_figure():
    """At the real 448 px / 14 px geometry the count is transformers' `256 + 1 + mask + rows + 16`: one crop
    gives 256 global + 16 row separators + 1 separator + 256 + 16 for the crop."""
    ip = Phi4MMImageProcessorTorch()
    assert ip.num_tokens(448, 448) == 256 + 16 + 1 + 256 + 16
    assert ip.num_tokens(448, 896) == 256 + 16 + 1 + 2 * 256 + 16  # 1 row of 2 crops: 32 tokens a row, 16 rows
    wide = ip.num_tokens(100, 448)  # 1 crop, its lower rows padding: fewer tokens than a full crop
    assert 256 + 16 + 1 < wide < 545


@pytest.mark.parametrize("size", [(90, 60), (30, 200), (56, 56), (400, 130)])
def test_image_tokens_match_the_models_features(size):
    from PIL import Image

    model, proc = build_tiny("tiny/phi4-multimodal")
    img = Image.new("RGB", size, (120, 30, 200))
    text = proc.apply_chat_template([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "q"}]}],
                                    tokenize=False)
    out = proc(text=[text], images=[img], return_tensors="pt")
    n = int((out["input_ids"] == proc.image_token_id).sum())
    assert n == proc.image_processor.num_tokens(size[1], size[0])
    with torch.no_grad():  # index_put of the image features into exactly these positions: a count mismatch raises
        assert torch.isfinite(model(**out).logits).all()


def _wave(seconds: float, seed: int):
    import numpy as np

    return (np.random.RandomState(seed).randn(int(16000 * seconds)) * 0.1).astype("float32")


def test_audio_clips_of_unequal_length_batch_as_the_processor_batches_them():
    """The processor writes no frame mask for one clip; the encoder writes it (all frames real), and the collator's
    zero padding then gives the processor's own batch of the two clips (a padded frame's log-mel is log(1) = 0 there
    too): the same mask, sizes, features and logits -- but for one frame. transformers 5.24 means to zero every frame
    past a shorter clip's own (its comment: "the unbatched original implementation skips last few audio values")
    and masks [down, up) with up one short, so the frame straddling the clip's end keeps its values in its batch;
    mmtune's batch follows the unbatched implementation there."""
    from mmtune.config.schema import RunConfig
    from mmtune.data.collate import Collator
    from mmtune.data.encode import Encoder
    from mmtune.data.records import Record

    model, proc = build_tiny("tiny/phi4-multimodal")
    model.eval()
    enc = Encoder(proc, FAMILY, RunConfig.model_validate({"model": {"name": "tiny/phi4-multimodal"}}))
    waves = [_wave(0.6, 0), _wave(1.7, 1)]
    recs = [Record(f"r{i}", "test", [{"role": "user", "content": [{"type": "audio", "audio": w, "sampling_rate": 16000},
                                                                  {"type": "text", "text": "How many?"}]},
                                     {"role": "assistant", "content": [{"type": "text", "text": "3"}]}])
            for i, w in enumerate(waves)]
    items = [enc.encode(r) for r in recs]
    assert all(it["audio_attention_mask"].all() for it in items)
    batch = Collator(proc.tokenizer.pad_token_id)(items)
    theirs = proc(text=[enc.rendered(r) for r in recs], audio=waves, padding=True, return_tensors="pt")
    own = items[0]["audio_input_features"].shape[1]
    assert theirs["audio_input_features"][0, own:].abs().sum() > 0  # the straddling frame (docstring)
    theirs["audio_input_features"][0, own:] = 0
    for key in ("audio_input_features", "audio_attention_mask", "audio_embed_sizes"):
        assert torch.equal(batch[key], theirs[key]), key
    assert not batch["audio_attention_mask"][0].all()  # the short clip's padded frames
    real = theirs["attention_mask"].bool()
    assert torch.equal(batch["input_ids"][real], theirs["input_ids"][real])
    with torch.no_grad():
        ours = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
        ref = model(**theirs).logits
    torch.testing.assert_close(ours[real], ref[real], rtol=1e-5, atol=1e-5)


def test_saved_processor_reloads_without_torchvision(tmp_path):
    from mmtune.config.schema import RunConfig
    from mmtune.models.processor_loading import load_processor_from

    _, proc = build_tiny("tiny/phi4-multimodal")
    proc.save_pretrained(str(tmp_path))
    cfg = RunConfig.model_validate({"model": {"name": str(tmp_path)}})
    again = load_processor_from(str(tmp_path), FAMILY, cfg)
    # rebuilt with mmtune's image processor: without torchvision, and with it too (transformers cannot name it)
    assert isinstance(again.image_processor, Phi4MMImageProcessorTorch)
    assert again.image_processor.size == proc.image_processor.size
    assert again.image_processor.dynamic_hd == proc.image_processor.dynamic_hd
    assert again.audio_processor.feature_size == proc.audio_processor.feature_size
    assert again.tokenizer.image_token_id == proc.tokenizer.image_token_id
    from PIL import Image

    img = Image.new("RGB", (90, 60), (1, 2, 3))
    a = proc(text=["<|image|>"], images=[img], return_tensors="pt")
    b = again(text=["<|image|>"], images=[img], return_tensors="pt")
    assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["image_pixel_values"], b["image_pixel_values"])


def test_lora_targets_the_fused_decoder_linears_only():
    from mmtune.adapters import apply_adapters
    from mmtune.config.schema import AdapterConfig

    model, _ = build_tiny("tiny/phi4-multimodal")
    res = apply_adapters(model, FAMILY, AdapterConfig(method="lora", r=4))
    assert res.lora_targets and all(t.startswith("model.layers.") and t.rsplit(".", 1)[-1] in LORA_TARGETS
                                    for t in res.lora_targets)
    assert {t.rsplit(".", 1)[-1] for t in res.lora_targets} == set(LORA_TARGETS)
    assert res.table.lora_by_component.keys() == {"decoder"}


def _run_config(tmp: Path, out: Path, rows: list[dict]) -> Path:
    import yaml

    data = tmp / "mixed.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = {"output_dir": str(out), "model": {"name": "tiny/phi4-multimodal"},
           "data": {"train": str(data), "media_root": str(DATA), "max_length": 2048},
           "adapter": {"method": "lora", "r": 4, "dropout": 0.1},  # dropout: the RNG state matters for exactness
           "train": {"max_steps": 4, "save_every": 2, "micro_batch_size": 1, "grad_accum": 1, "precision": "fp32",
                     "device": "cpu", "warmup_steps": 1, "seed": 0},
           "eval": {"every": None}, "logging": {"tensorboard": False}}
    path = tmp / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_run_with_audio_and_images_resumes_bit_identically(tmp_path):
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    rows = [json.loads(ln) for f in ("audio_qa.jsonl", "image_qa.jsonl")
            for ln in (DATA / f).read_text().splitlines()[:2] if ln.strip()]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    train(build_run(load_config(_run_config(tmp_path, straight, rows), [])))
    assert train(build_run(load_config(_run_config(tmp_path, stopped, rows), [])), stop_after=2) is None
    train(build_run(load_config(_run_config(tmp_path, stopped, rows), [])))
    final = "checkpoint-4/trainable.safetensors"
    assert (stopped / final).read_bytes() == (straight / final).read_bytes()


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="torchvision is installed here")
def test_a_processor_part_that_cannot_import_is_a_clear_error(tmp_path):
    """A folder naming transformers' own Phi-4 image processor (it imports torchvision), loaded by transformers'
    AutoProcessor (a family without the rebuild) where torchvision is missing: the package and the install line,
    not an ImportError traceback."""
    import dataclasses

    from mmtune.config.schema import RunConfig
    from mmtune.models.processor_loading import load_processor_from
    from mmtune.models.requirements import MissingPackageError

    _, proc = build_tiny("tiny/phi4-multimodal")
    proc.save_pretrained(str(tmp_path))
    spec = json.loads((tmp_path / "processor_config.json").read_text())
    spec["image_processor"]["image_processor_type"] = "Phi4MultimodalImageProcessor"  # as the hub's folder names it
    (tmp_path / "processor_config.json").write_text(json.dumps(spec))
    plain = dataclasses.replace(FAMILY, rebuild_processor=None)
    with pytest.raises(MissingPackageError) as e:
        load_processor_from(str(tmp_path), plain, RunConfig.model_validate({"model": {"name": str(tmp_path)}}))
    assert "torchvision" in e.value.what and e.value.fix.startswith("pip install torchvision")


def test_the_twins_audio_reaches_the_logits():
    """Two different clips give different predictions: the clip itself reaches the decoder, not only the speech
    projector's biases (transformers' std-0.02 init shrinks the convs' activations, and each Conformer block's
    closing LayerNorm rescales them)."""
    model, proc = build_tiny("tiny/phi4-multimodal")
    model.eval()
    text = proc.apply_chat_template([{"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": "q"}]}],
                                    tokenize=False)
    with torch.no_grad():
        a, b = (model(**proc(text=[text], audio=[_wave(1.0, seed)], return_tensors="pt")).logits[0, -1] for seed in (0, 7))
    assert (a - b).abs().max() > 1e-3
