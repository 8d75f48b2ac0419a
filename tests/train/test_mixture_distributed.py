"""Seed 002 on two CPU ranks (torchrun, gloo): a ChartQA + InfoVQA + OCR-VQA mixture on the tiny
LLaVA-OneVision twin with LoRA on the decoder and the last vision block. The per-source metrics the
2-rank run reports equal a 1-process evaluation of its checkpoint, and a run stopped after step 2 and
started again continues with exactly the losses of an uninterrupted run."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torchrun import failure, launch, torchrun_cmd  # noqa: E402

# LoRA dropout off: checkpoints hold rank 0's RNG state only and every rank restores it, so with
# dropout rank 1's masks after a resume differ from an uninterrupted run (loss off by ~1e-5 relative,
# measured). That is the checkpoint's RNG handling, not the mixture's; this test pins what the mixture
# guarantees: the same records, in the same order, on each rank, after a restart.
DROPOUT = 0.0
ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, data: Path, out: Path, steps: int, accept_changes: bool = False) -> Path:
    cfg = {
        "output_dir": str(out),
        "model": {"name": "tiny/llava-onevision", "gradient_checkpointing": True},
        "data": {"train": [
            {"path": str(data / "chartqa" / "ChartQA Dataset"), "format": "chartqa", "weight": 0.4},
            {"path": str(data / "infovqa"), "format": "infovqa", "weight": 0.3},
            {"path": str(data / "ocrvqa" / "dataset.json"), "format": "ocrvqa", "weight": 0.3}],
            "mixture_size": 24, "max_length": 512, "eval_max_samples": 6},
        "adapter": {"method": "lora", "r": 4, "dropout": DROPOUT, "target_modules": ["q_proj", "v_proj", "vision[-1:]:q_proj"]},
        "train": {"max_steps": steps, "micro_batch_size": 1, "grad_accum": 2, "lr": 1e-3, "scheduler": "constant",
                  "warmup_steps": 0, "precision": "fp32", "device": "cpu", "save_every": 2, "resume": True,
                  "seed": 3, "accept_changes": accept_changes},
        "eval": {"best_metric": "mixture/score", "max_new_tokens": 4, "batch_size": 2},
        "logging": {"tensorboard": False},
    }
    path = tmp_path / f"{out.name}-{steps}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _torchrun(config: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = launch(lambda port: torchrun_cmd(port, "-m", "mmtune.cli", "train", str(config), "--skip-checks"),
                 timeout=900, env=env)
    assert out.returncode == 0, failure(out)


def _losses(run: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if r["kind"] == "train"}


@pytest.mark.distributed
def test_two_rank_mixture_metrics_match_one_process_and_resume_is_exact(tmp_path):
    spec = importlib.util.spec_from_file_location("make_published", ROOT / "recipes" / "data" / "make_published.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(tmp_path / "data")

    whole = tmp_path / "whole"
    _torchrun(_config(tmp_path, tmp_path / "data", whole, 4))
    summary = json.loads((whole / "summary.json").read_text())
    # the scale printed at start and kept in summary.json counts both ranks: 2 x micro-batch 1 x accumulation 2
    assert summary["scale"]["world_size"] == 2 and summary["scale"]["effective_batch"] == 4
    assert summary["scale"]["steps_per_epoch"] == 6  # 24 samples, 12 per rank, 2 micro-batches per step
    per_source = {k: v for k, v in summary["eval"].items() if "/" in k}
    assert {"chartqa/relaxed_accuracy", "infovqa/anls", "ocrvqa/exact_match", "mixture/score"} <= set(per_source)

    from mmtune.commands.evaluate import run_eval

    one = run_eval(_config(tmp_path, tmp_path / "data", whole, 4), [f"checkpoint={whole / 'checkpoint-4'}"])
    for k, v in summary["eval"].items():
        assert one[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k

    parted = tmp_path / "parted"
    _torchrun(_config(tmp_path, tmp_path / "data", parted, 2))
    # Resumes from checkpoint-2 with max_steps raised on purpose (the resume guard's accept_changes; the
    # constant schedule makes the accepted change leave steps 3-4 exactly as in the uninterrupted run).
    _torchrun(_config(tmp_path, tmp_path / "data", parted, 4, accept_changes=True))
    a, b = _losses(whole), _losses(parted)
    assert sorted(a) == [1, 2, 3, 4]
    for step in (3, 4):
        assert b[step] == pytest.approx(a[step], rel=1e-5), (step, a, b)
