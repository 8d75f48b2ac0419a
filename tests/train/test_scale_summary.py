"""The start-up summary and summary.json say what a step and an epoch are over all ranks: records per
step (world size x micro-batch x accumulation), lr, tokens per step, steps per epoch, and the time per
epoch once steps have been timed."""

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.train.loop import train


def test_effective_batch_tokens_steps_and_time_per_epoch(tiny_vl_config):
    from mmtune.console import console
    from mmtune.train.summary import print_start_summary

    cfg = load_config(tiny_vl_config(train={"max_steps": 5, "micro_batch_size": 2, "grad_accum": 2, "lr": 3e-4}), [])
    run = build_run(cfg)
    with console.capture() as cap:
        print_start_summary(run, [])
    text = " ".join(cap.get().split())
    lengths = [x["total"] for x in run.train_lengths]
    tokens = round(4 * sum(lengths) / len(lengths))
    assert "4 records per step = 1 rank(s) x micro-batch 2 x accumulation 2; lr 0.0003" in text
    assert f"~{tokens:,} tokens per step" in text and "3 steps per epoch of 12 records" in text
    with console.capture() as cap:
        summary = train(run)
    scale = summary["scale"]
    assert scale["effective_batch"] == 4 and scale["world_size"] == 1 and scale["lr"] == 3e-4
    assert scale["steps_per_epoch"] == 3 and scale["epochs"] == pytest.approx(5 * 4 / 12, abs=1e-3)
    assert scale["tokens_per_step"] == tokens
    assert scale["steps_timed"] == 4  # steps 2-5: the first step of the process warms up
    assert scale["epoch_time_s"] == pytest.approx(3 * scale["step_time_s"], abs=1e-3) and scale["step_time_s"] > 0
    assert "time per epoch ~" in cap.get()
