"""Exact resume of a mixture-of-experts family (Qwen3-Omni's thinker, the tiny twin) on video + audio records:
under full fine-tuning the fused experts and the router train, under LoRA only the attention adapters do; either
way 2N steps straight == N steps, stop, resume N more (the loop's resume contract, test_loop.py, for MoE state)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.train.loop import train

DATA = Path(__file__).resolve().parents[2] / "recipes" / "data"


def _config(tmp_path: Path, out: str, method: str) -> Path:
    path = tmp_path / f"{out}.yaml"
    path.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / out),
        "model": {"name": "tiny/qwen3-omni", "video_frames": 4},
        "data": {"train": str(DATA / "video_audio_qa.jsonl"), "max_length": 1024},
        "adapter": {"method": method, "r": 4, "dropout": 0.1},
        "train": {"max_steps": 4, "save_every": 2, "micro_batch_size": 2, "grad_accum": 1, "lr": 1e-3,
                  "precision": "fp32", "device": "cpu", "warmup_steps": 1, "seed": 0},
        "logging": {"tensorboard": False},
    }))
    return path


def _losses(out: Path) -> list[tuple[int, float]]:
    rows = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if r["kind"] == "train"]


@pytest.mark.parametrize("method", ["full", "lora"])
def test_moe_resume_continues_identically(method, tmp_path):
    train(build_run(load_config(_config(tmp_path, "straight", method), [])))
    broken = load_config(_config(tmp_path, "broken", method), [])
    assert train(build_run(broken), stop_after=2) is None
    assert (tmp_path / "broken" / "checkpoint-2").is_dir()
    train(build_run(broken))
    a, b = _losses(tmp_path / "straight"), _losses(tmp_path / "broken")
    assert [s for s, _ in b] == [1, 2, 3, 4]
    for (sa, la), (sb, lb) in zip(a, b):
        assert sa == sb and abs(la - lb) < 1e-6, (a, b)
