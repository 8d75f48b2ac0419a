"""Public bug reports, batch 34: mixed modalities in one run: text-only records beside images, video and audio
(docs/doctor.md, the section of that name).

Each broken setup of a public thread rebuilt on a tiny twin: micro-batches that mix an image, a clip, a sound and a
text-only record through the real encoder, collator and model; LLaVA's mix665k layout read by the loader; full
training of a VLM on image and text-only records on 2 gloo ranks."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
from torchrun import failure, launch, torchrun_cmd  # noqa: E402


def _clip(path: Path, frames: int = 8, rate: int = 4, size=(64, 48)) -> str:
    import av

    w, h = size
    with av.open(str(path), "w") as out:
        vs = out.add_stream("mpeg4", rate=rate)
        vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
        for i in range(frames):
            out.mux(vs.encode(av.VideoFrame.from_ndarray(np.full((h, w, 3), i * 20, np.uint8), format="rgb24")))
        out.mux(vs.encode(None))
    return str(path)


def _media(tmp_path: Path) -> dict:
    import soundfile as sf
    from PIL import Image

    Image.new("RGB", (64, 64), (200, 20, 20)).save(tmp_path / "i.png")
    sf.write(tmp_path / "a.wav", (0.3 * np.sin(np.arange(16000) / 10)).astype(np.float32), 16000)
    return {"image": {"type": "image", "path": str(tmp_path / "i.png")},
            "video": {"type": "video", "path": _clip(tmp_path / "v.mp4")},
            "audio": {"type": "audio", "path": str(tmp_path / "a.wav")}}


def _step(name: str, contents: list[list[dict]]):
    """One micro-batch of these records' user turns, encoded, collated and run forward and backward."""
    import torch

    from mmtune.config.schema import RunConfig
    from mmtune.data.collate import Collator
    from mmtune.data.encode import Encoder
    from mmtune.data.records import Record
    from mmtune.models.tiny import build_tiny, tiny_config_and_processor

    _, proc = tiny_config_and_processor(name)
    enc = Encoder(proc, None, RunConfig.model_validate({"model": {"name": name}}))
    items = [enc.encode(Record(f"r{i}", f"d.jsonl:{i + 1}", [
        {"role": "user", "content": [*parts, {"type": "text", "text": "What is it?"}]},
        {"role": "assistant", "content": "a thing"}])) for i, parts in enumerate(contents)]
    batch = Collator(proc.tokenizer.pad_token_id)(items)
    model, _ = build_tiny(name)
    out = model(**batch)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    return batch, model


# ----------------------------------------------------------------------------- image and video in one micro-batch
# https://github.com/QwenLM/Qwen3-Omni/issues/91, https://github.com/QwenLM/Qwen3-Omni/issues/93 ("shape mismatch:
# value tensor of shape [6042, 2048] cannot be broadcast to indexing result" when a batch holds an image record and a
# video record), https://github.com/2U1/Qwen-VL-Series-Finetune/issues/1 (KeyError 'pixel_values' on a video record,
# then "inputs_embeds[video_mask] = video_embeds ... shape [0, 3584]"), https://github.com/QwenLM/Qwen3-VL/issues/1884
# (single image, several images and video records fine-tuned together). mmtune's collator concatenates each media
# key over the items that have it, so the image and the clip keep their own pixels and grids.

@pytest.mark.parametrize("name", ["tiny/qwen2-vl", "tiny/qwen2.5-vl"])
def test_image_video_and_text_only_records_share_a_micro_batch(tmp_path, name):
    m = _media(tmp_path)
    batch, model = _step(name, [[m["image"]], [m["video"]], []])
    assert batch["image_grid_thw"].shape[0] == 1 and batch["video_grid_thw"].shape[0] == 1
    vision = [p for n, p in model.named_parameters() if ".visual." in f".{n}" or n.startswith("visual.")]
    assert vision and all(p.grad is not None for p in vision), "the tower gets gradient from both media"


# ----------------------------------------------------------------------------- Qwen2.5-Omni: every medium at once
# https://github.com/modelscope/ms-swift/pull/3613 (Qwen2.5-Omni fine-tuned on audio, image and text together:
# "get_rope_index ... RuntimeError: shape mismatch: value tensor of shape [3, 160]"), https://github.com/hiyouga/
# LlamaFactory/issues/7552 (Qwen2.5-Omni audio fine-tuning fails), https://github.com/DAMO-NLP-SG/VideoLLaMA2/issues/84
# (text-only, image and video records in one file and one run). The tiny Thinker takes a micro-batch of an image
# record, an audio record, a video record and a text-only record, and one record holding all three media.

def test_omni_takes_image_audio_video_and_text_only_records_in_one_micro_batch(tmp_path):
    m = _media(tmp_path)
    batch, _ = _step("tiny/qwen2.5-omni", [[m["image"]], [m["audio"]], [m["video"]], []])
    assert {"pixel_values", "pixel_values_videos", "input_features"} <= set(batch)
    assert batch["input_features"].shape[0] == 1 and batch["video_grid_thw"].shape[0] == 1
    _step("tiny/qwen2.5-omni", [[m["image"], m["audio"], m["video"]]])


# ----------------------------------------------------------------------------- LLaVA's mix665k: text rows, no image key
# https://github.com/haotian-liu/LLaVA/issues/546 (~40k records of llava_v1_5_mix665k.json have no "image": ShareGPT's
# pure-text samples), https://github.com/haotian-liu/LLaVA/issues/1467, https://github.com/modelscope/ms-swift/issues/606,
# https://github.com/InternLM/xtuner/issues/444 (text-only and image-text conversations in one LLaVA-format file).
# The loader reads the file as it is: the rows without the key are text-only records, the others keep their image.

def test_llava_rows_without_an_image_key_are_text_only_records(tmp_path):
    from PIL import Image

    from mmtune.config.schema import DataConfig
    from mmtune.data.sources import load_records

    Image.new("RGB", (32, 32)).save(tmp_path / "i.png")
    rows = [{"id": "a", "image": "i.png", "conversations": [{"from": "human", "value": "<image>\nWhat colour?"},
                                                            {"from": "gpt", "value": "black"}]},
            {"id": "wgByO4Y_0", "model": "", "conversations": [{"from": "human", "value": "What is 1+1?"},
                                                               {"from": "gpt", "value": "2"}]}]
    (tmp_path / "mix.json").write_text(json.dumps(rows))
    rs = load_records(str(tmp_path / "mix.json"), DataConfig(on_bad_record="error"))
    kinds = [sorted({p.get("type") for t in r.messages if isinstance(t["content"], list) for p in t["content"]})
             for r in rs.records]
    assert len(rs.records) == 2 and "image" in kinds[0] and "image" not in kinds[1], kinds


# ----------------------------------------------------------------------------- full training, text-only batches, DDP
# https://github.com/zhangfaen/finetune-Qwen2-VL/issues/36 (timeouts training Qwen2-VL on text-only and image records),
# https://github.com/modelscope/ms-swift/issues/2147 (Qwen2-VL, text mixed in, several GPUs: fails),
# https://github.com/2U1/Qwen-VL-Series-Finetune/issues/17, https://github.com/hiyouga/LlamaFactory/issues/5860
# (mixed text-only + image-text data "not supported"). Full fine-tuning of the tiny Qwen2-VL (tower and projector
# trained) on alternating image / text-only records at micro-batch 1 on 2 gloo ranks: each step one rank has an image
# and the other none; the run sets DDP find_unused_parameters for both components and trains its 3 steps.

@pytest.mark.slow  # ~30 s on 2 cores: two ranks start, load and train 3 steps
@pytest.mark.distributed
def test_full_training_on_image_and_text_only_records_under_ddp(tmp_path):
    from test_public_reports_distributed import _mixed_records

    data = _mixed_records(tmp_path / "data")
    cfg = {"output_dir": str(tmp_path / "run"), "model": {"name": "tiny/qwen2-vl", "gradient_checkpointing": False},
           "data": {"train": str(data), "max_length": 256}, "adapter": {"method": "full"},
           "train": {"max_steps": 3, "micro_batch_size": 1, "grad_accum": 1, "lr": 1e-3, "precision": "fp32",
                     "device": "cpu", "warmup_steps": 1, "seed": 0},
           "eval": {"every": None}, "logging": {"tensorboard": False}}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = launch(lambda port: torchrun_cmd(port, "-m", "mmtune.cli", "train", str(path)), timeout=600,
                 env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, failure(out)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2, 3]
    decisions = json.loads((tmp_path / "run" / "summary.json").read_text())["decisions"]
    assert any("find_unused_parameters=True: projector, vision" in d for d in decisions), decisions
