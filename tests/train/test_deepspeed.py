"""train.strategy=zero2 / zero3 run by DeepSpeed itself on 2 CPU ranks (its CPU accelerator, gloo): the
same losses as ddp and as one process, checkpoints that resume bit-identical, evaluation on every rank,
and the mixed text-only / image batches that hang ZeRO-3 kept in step by the loop.

DeepSpeed is an optional dependency (the [deepspeed] extra); .ci/run installs it (unless MMTUNE_CI_DEEPSPEED=0,
or without g++, which it says), so these run in CI. Without it they skip, and tests/test_launch_config.py
checks the refusal."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence_runs import STEPS, run_case  # noqa: E402
from test_fsdp import assert_eval_on_every_rank_matches_one_process, close, two_ranks  # noqa: E402

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                       reason="DeepSpeed is not installed here: pip install 'mmtune[deepspeed]' "
                              "after a CPU torch (docs/distributed.md)"),
    pytest.mark.slow,
    pytest.mark.distributed,
]

CASES = ("text-lora", "image-lora", "image-full", "mixed-lora")


def _summary(tmp_path, case, tag):
    return json.loads((tmp_path / case / f"run-{tag}" / "summary.json").read_text())


def test_zero2_and_zero3_match_ddp_and_one_process(tmp_path):
    """~3 min: 12 two-rank runs in one launch, 4 one-process runs."""
    jobs = [{"key": f"{c}:{s}", "case": c, "strategy": s} for c in CASES for s in ("zero3", "zero2", "ddp")]
    two = two_ranks(jobs, tmp_path)
    for case in CASES:
        one = run_case(case, "ddp", tmp_path / "one", world=1)
        assert len(one) == STEPS and one[-1] < one[0], (case, one)
        for s in ("zero2", "zero3"):
            assert close(two[f"{case}:{s}"], two[f"{case}:ddp"]), (case, s, two[f"{case}:{s}"], two[f"{case}:ddp"])
            assert close(two[f"{case}:{s}"], one), (case, s, two[f"{case}:{s}"], one)
            summary = _summary(tmp_path, case, f"{s}-2")
            # DeepSpeed's own engine ran (accelerate silently fell back to DDP on CPU ranks before).
            engine = [d for d in summary["decisions"] if d.startswith("DeepSpeed ZeRO-")]
            assert engine and engine[0].startswith(f"DeepSpeed ZeRO-{s[-1]} engine: 2 ranks over gloo"), summary["decisions"]
            ds = json.loads((tmp_path / case / f"run-{s}-2" / "deepspeed.json").read_text())
            assert ds["zero_optimization"]["stage"] == int(s[-1])
        # ZeRO-3 gathers each tower's weights from every rank: the text-only batches got a masked image row.
        rows = _summary(tmp_path, case, "zero3-2").get("tower_rows_added")
        assert (rows or 0) > 0 if case == "mixed-lora" else rows in (None, 0), (case, rows)
        assert "tower_rows_added" not in _summary(tmp_path, case, "zero2-2")  # whole weights per rank: not needed


def test_zero_checkpoints_resume_bit_identical_and_export(tmp_path):
    """~2 min: killed after step 3 and run again equals the straight run (LoRA dropout: every rank's RNG),
    under zero2 and zero3 (LoRA) and zero3 (full fine-tune, weights partitioned); the loadable folders hold
    whole weights; another world size or strategy is refused with the way out."""
    import torch
    from safetensors.torch import load_file

    from mmtune.errors import MMTuneError

    every, dropout = {"save_every": 3}, {"dropout": 0.1}
    runs = [("image-lora", "zero2", dropout), ("image-lora", "zero3", dropout), ("image-full", "zero3", None)]
    jobs = []
    for case, s, adapter in runs:
        base = {"case": case, "strategy": s, "adapter": adapter, **every}
        jobs += [{**base, "key": f"{case}:{s}:straight", "tag": f"straight-{s}"},
                 {**base, "key": f"{case}:{s}:killed", "tag": f"killed-{s}", "stop_after": 3},
                 {**base, "key": f"{case}:{s}:resumed", "tag": f"killed-{s}"}]
    two = two_ranks(jobs, tmp_path)
    for case, s, _ in runs:
        straight = two[f"{case}:{s}:straight"]
        assert len(straight) == STEPS and two[f"{case}:{s}:resumed"] == straight, (case, s, two)
        ckpt = tmp_path / case / f"run-killed-{s}" / "checkpoint-3"
        parts = sorted(p.name for p in (ckpt / "deepspeed" / "state").glob("*optim_states.pt"))
        assert len(parts) == 2, parts  # each rank wrote its optimizer partition
        manifest = json.loads((ckpt / "manifest.json").read_text())["files"]
        assert {f"deepspeed/state/{p}" for p in parts} <= set(manifest) and "rng/rank-1.json" in manifest
        trainable = load_file(str(ckpt / "trainable.safetensors"))
        assert trainable and all(t.numel() > 0 for t in trainable.values())  # gathered, not ZeRO-3's placeholders

    # A full fine-tune's model/ folder holds the gathered weights: the same as trainable.safetensors.
    from transformers import AutoModelForImageTextToText

    ckpt = tmp_path / "image-full" / "run-killed-zero3" / "checkpoint-3"
    model = dict(AutoModelForImageTextToText.from_pretrained(str(ckpt / "model")).named_parameters())
    saved = load_file(str(ckpt / "trainable.safetensors"))
    assert set(saved) <= set(model)
    for n, t in saved.items():
        torch.testing.assert_close(model[n].detach(), t, rtol=0, atol=0)

    # One process cannot take DeepSpeed's 2-rank partitions: refused, with what to do.
    with pytest.raises(MMTuneError) as e:
        run_case("image-lora", "zero3", tmp_path, 1, tag="killed-zero3", adapter=dropout, grad_accum=2, **every)
    assert "DeepSpeed engine" in str(e.value) and "on 2 process(es)" in e.value.fix


def test_evaluation_on_every_rank_under_zero3_gives_the_one_process_metrics(tmp_path):
    """~1 min: generation under ZeRO-3 runs in step on both ranks (synced), the masked tower rows keep the
    mixed eval batches in step, and the gathered metrics are those of one process."""
    assert_eval_on_every_rank_matches_one_process(tmp_path, ("zero3", "zero2"))


def test_torchrun_and_accelerate_launch_as_a_user_types_them(tmp_path):
    """~1.5 min: `torchrun --nproc_per_node 2 -m mmtune.cli train CONFIG` under zero3 (preflight included)
    writes deepspeed.json + accelerate_config.yaml; `accelerate launch --config_file` that file runs the same
    training with the user's file in charge (mmtune passes no config of its own) and gives the same losses."""
    import os

    from equivalence_runs import losses, write_config
    from test_fsdp import SRC
    from torchrun import failure, launch, torchrun_cmd

    cfg = write_config("mixed-lora", "zero3", tmp_path, 2, max_steps=2)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SRC)}
    first = tmp_path / "torchrun"
    res = launch(lambda port: torchrun_cmd(port, "-m", "mmtune.cli", "train", str(cfg), f"output_dir={first}"),
                 timeout=900, env=env)
    assert res.returncode == 0, failure(res, 3000)
    second = tmp_path / "accelerate"
    res = launch(lambda port: [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                               str(first / "accelerate_config.yaml"), "--main_process_port", str(port), "-m", "mmtune.cli",
                               "train", str(cfg), f"output_dir={second}"], timeout=900, env=env)
    assert res.returncode == 0, failure(res, 3000)
    assert len(losses(first)) == 2 and close(losses(second), losses(first)), (losses(first), losses(second))
    for run in (first, second):
        decisions = json.loads((run / "summary.json").read_text())["decisions"]
        assert any(d.startswith("DeepSpeed ZeRO-3 engine: 2 ranks") for d in decisions), decisions
