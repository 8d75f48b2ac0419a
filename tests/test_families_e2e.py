"""Every family through the real loop on CPU: a few steps on a fixed batch make the loss fall, and
the saved PEFT adapter, loaded back onto a fresh base, gives the trained model's logits."""

import json
import sys
from pathlib import Path

import pytest
import torch
import yaml

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.train.loop import train

sys.path.insert(0, str(Path(__file__).resolve().parent / "train"))
from equivalence_runs import video_only  # noqa: E402

from tests.family_registry import DATA_FILE, TWINS, family_of_twin, first_medium  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "recipes" / "data"


def _two_records(src: str, tmp_path: Path, keep=None) -> Path:
    rows = [json.loads(ln) for ln in (DATA / src).read_text().splitlines() if ln.strip()]
    if keep:
        rows = [keep(r) for r in rows]
    out = tmp_path / "fixed.jsonl"
    out.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n")
    return out


CASES = {
    # name: (tiny twin, data file, record transform, adapter method)
    "qwen2-text": ("tiny/qwen2", None, None, "lora"),
    "qwen2-vl-image": ("tiny/qwen2-vl", "image_qa.jsonl", None, "lora"),
    "qwen2-vl-video": ("tiny/qwen2-vl", "video_audio_qa.jsonl", video_only, "lora"),
    "qwen2.5-vl-image": ("tiny/qwen2.5-vl", "image_qa.jsonl", None, "lora"),
    "qwen3-vl-image": ("tiny/qwen3-vl", "image_qa.jsonl", None, "lora"),
    "qwen3-vl-video": ("tiny/qwen3-vl", "video_audio_qa.jsonl", video_only, "lora"),
    "qwen2-audio": ("tiny/qwen2-audio", "audio_qa.jsonl", None, "lora"),
    "qwen2.5-omni-video+audio": ("tiny/qwen2.5-omni", "video_audio_qa.jsonl", None, "lora"),
    "qwen3-omni-video+audio": ("tiny/qwen3-omni", "video_audio_qa.jsonl", None, "lora"),  # MoE decoder: the recipe's data
    "llava-image": ("tiny/llava", "image_qa.jsonl", None, "lora"),
    "llava-next-image-qlora": ("tiny/llava-next", "image_qa.jsonl", None, "qlora"),
}
# Every other registered family, on its first medium: a family added as one module is trained here too.
for _twin in TWINS:
    if _twin not in {c[0] for c in CASES.values()}:
        _m = first_medium(_twin)
        CASES[f"{family_of_twin(_twin).name}-{_m}"] = (_twin, DATA_FILE[_m], video_only if _m == "video" else None, "lora")


@pytest.mark.parametrize("case", sorted(CASES))
def test_family_trains_and_adapter_roundtrips(case, tmp_path):
    from peft import PeftModel

    from mmtune.models.tiny import build_tiny

    twin, src, transform, method = CASES[case]
    data = "synthetic:arithmetic" if src is None else str(_two_records(src, tmp_path, transform))
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"),
        "model": {"name": twin, "gradient_checkpointing": True},
        "data": {"train": data, "media_root": str(DATA), "max_length": 2048, "synthetic_train_size": 2},
        "adapter": {"method": method, "r": 8, "dropout": 0.0},
        "train": {"max_steps": 12, "micro_batch_size": 2, "lr": 1e-2, "precision": "fp32", "device": "cpu",
                  "scheduler": "constant", "seed": 0},
        "logging": {"tensorboard": False},
    }))
    run = build_run(load_config(cfg_path, []))
    assert len(run.train_set.records) == 2  # one fixed batch, every step
    train(run)
    losses = [json.loads(ln)["loss"] for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(x == x for x in losses) and sum(losses[-3:]) / 3 < 0.9 * losses[0], losses

    model = run.unwrapped_model().eval()
    batch = run.collator([run.encoder.encode(r) for r in run.train_set.records])
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        trained = model(**inputs).logits
    if method == "qlora":
        return  # a fresh 4-bit base is re-quantized from a new random init; the roundtrip is the LoRA case's
    base, _ = build_tiny(twin)
    reloaded = PeftModel.from_pretrained(base, str(tmp_path / "run" / "checkpoint-12" / "adapter")).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs).logits, trained, rtol=1e-4, atol=1e-4)
