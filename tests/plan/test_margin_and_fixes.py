"""The margin rule at its boundary, and the smallest changes a plan that does not fit prints (plan/fixes.py),
on a tiny real model and a GPU sized between two of its plans."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mmtune.config import load_config
from mmtune.gpus import GPUS, GiB
from mmtune.plan.margin import MARGIN_FLOOR_BYTES, fits, required_headroom

COMMON = ["model.name=tiny/qwen2", "data.max_length=2048", "train.precision=fp32", "adapter.method=lora",
          "model.gradient_checkpointing=true", "train.optimizer=adamw"]


def test_margin_rule_at_the_boundary():
    # a share of the plan, never under the floor
    assert required_headroom(10 * GiB) == int(0.5 * GiB) == MARGIN_FLOOR_BYTES
    assert required_headroom(21 * GiB) == int(21 * GiB * 0.05)
    assert required_headroom(21 * GiB, 10) == int(21 * GiB * 0.10)
    # decided on whole bytes: exactly the headroom left fits, one byte less does not
    total = 21 * GiB
    gpu = total + required_headroom(total)
    assert fits(total, gpu) and not fits(total, gpu - 1)
    # seed 001's figures (issue 29): 21.29 GiB planned on a Quadro RTX 6000's 23.65 usable GiB fits
    assert fits(int(21.29 * GiB), GPUS["quadro-rtx-6000"].total_bytes)


def test_verdict_line_states_both_figures():
    from types import SimpleNamespace

    from mmtune.plan.margin import verdict_line

    r = SimpleNamespace(fits=False, gpu_name="T4", process_total_bytes=int(14.8 * GiB), gpu_total_bytes=15 * GiB,
                        margin_bytes=int(0.2 * GiB), required_margin_bytes=int(0.74 * GiB), required_margin_pct=5.0)
    line = verdict_line(r)
    assert line.startswith("does NOT fit T4: 14.80 GiB planned of 15.00 GiB, 0.20 GiB free, headroom asked 0.74 GiB")
    assert line.endswith("0.54 GiB short")


@pytest.fixture(scope="module")
def sized_gpu():
    """A T4 whose memory holds this run at micro-batch 1 but not at 8 (with the headroom)."""
    from mmtune.plan.planner import predict

    big = predict(load_config(None, COMMON + ["train.micro_batch_size=8", "train.grad_accum=1"]), gpu="t4")
    small = predict(load_config(None, COMMON + ["train.micro_batch_size=1", "train.grad_accum=8"]), gpu="t4")
    assert small.process_total_bytes < big.process_total_bytes
    mid = (small.process_total_bytes + big.process_total_bytes) // 2
    return replace(GPUS["t4"], usable_bytes=mid + required_headroom(mid))


def test_smallest_fix_is_found_and_never_a_no_op(sized_gpu):
    from mmtune.plan.fixes import find_fix, planner_for
    from mmtune.plan.planner import predict
    from mmtune.resolve import resolve_run, target_for

    cfg = load_config(None, COMMON + ["train.micro_batch_size=8", "train.grad_accum=1"])
    resolved = resolve_run(cfg, target_for(cfg, sized_gpu, local=False))
    first = predict(resolved)
    assert not first.fits
    found = find_fix(resolved, first=first, plan_fn=planner_for(cfg, gpu=sized_gpu))
    assert found.fix is not None and found.fix.result.fits, found.why_none
    ov = found.fix.overrides
    # the cheapest move that fits: a smaller micro-batch, the effective batch kept; nothing the run already has
    assert ov["train.micro_batch_size"] < 8 and ov["train.micro_batch_size"] * ov["train.grad_accum"] == 8
    assert "model.gradient_checkpointing" not in ov  # already on
    assert all(f"{k}={v}" in found.fix.lines for k, v in ov.items() if not isinstance(v, bool))
    # replanned with the printed lines, it fits
    again = load_config(None, COMMON + ["train.micro_batch_size=8", "train.grad_accum=1"] + found.fix.lines)
    assert predict(resolve_run(again, target_for(again, sized_gpu, local=False))).fits


def test_a_run_at_micro_batch_1_is_not_told_to_use_micro_batch_1(sized_gpu):
    """Moves are built from the run's own values: at micro-batch 1 with 8-bit AdamW there is no such move."""
    from mmtune.plan.fixes import _moves

    cfg = load_config(None, COMMON + ["train.micro_batch_size=1", "train.optimizer=adamw_8bit",
                                      "train.loss_impl=chunked"])
    names = [m[0] for m in _moves(cfg)]
    assert "micro-batch" not in names and "8-bit AdamW" not in names and "chunked loss" not in names
    assert "checkpointing" not in names  # on already
    assert names == ["QLoRA", "shorter sequences"]


def test_plan_cli_ends_with_the_verdict_and_copyable_fix_lines(tmp_path, monkeypatch, sized_gpu):
    """`mmtune plan` on a run that does not fit: the verdict first and last, then the fix, one key=value per
    line, and the whole command with them."""
    from typer.testing import CliRunner

    import mmtune.gpus as gpus
    from mmtune.cli import app

    monkeypatch.setitem(gpus.GPUS, "t4-sized", replace(sized_gpu, id="t4-sized", name="T4 sized"))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: {name: tiny/qwen2}\ndata: {max_length: 2048}\nadapter: {method: lora}\n"
                   "train: {precision: fp32, micro_batch_size: 8, grad_accum: 1, optimizer: adamw}\n")
    res = CliRunner().invoke(app, ["plan", str(cfg), "--gpu", "t4-sized"], env={"COLUMNS": "80"})
    assert res.exit_code == 1, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    first_verdict = next(x for x in lines if x.startswith("does NOT fit"))
    at = next(i for i, x in enumerate(lines) if x.startswith("to make it fit"))
    assert lines[at - 1] == first_verdict  # the verdict again, right above the fix
    fix = [x.strip() for x in lines[at + 1:] if re_kv(x.strip())]
    assert fix and all(" " not in x for x in fix)  # one whole key=value per line, never cut
    assert lines[-1].strip().startswith(f"mmtune plan {cfg} ") and lines[-1].strip().endswith("--gpu t4-sized")
    assert all(x in lines[-1] for x in fix)


def re_kv(text: str) -> bool:
    import re

    return re.fullmatch(r"[a-z_]+\.[a-z_.]+=\S+", text) is not None


def test_doctor_mm001_fix_is_the_planners_smallest_change(tmp_path, monkeypatch, sized_gpu):
    import mmtune.gpus as gpus
    from mmtune.doctor.runner import run_doctor

    monkeypatch.setitem(gpus.GPUS, "t4-sized", replace(sized_gpu, id="t4-sized", name="T4 sized"))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: {name: tiny/qwen2}\ndata: {max_length: 2048}\nadapter: {method: lora}\n"
                   "train: {precision: fp32, micro_batch_size: 8, grad_accum: 1, optimizer: adamw}\n")
    rep = run_doctor(cfg, [], "t4-sized", only=["MM001"])
    (f,) = [f for f in rep.findings if f.code == "MM001"]
    assert f.severity == "error" and "does NOT fit T4 sized" in f.message
    assert f.fix.startswith("train.micro_batch_size=4 train.grad_accum=2"), f.fix
    assert f.where == "train.micro_batch_size, train.grad_accum"


@pytest.mark.parametrize("margin", ["nan", "inf", "-1"])
def test_a_margin_that_is_no_share_is_refused_naming_the_flag(margin):
    """`mmtune plan --margin nan` (or inf) raised ValueError / OverflowError converting the headroom to bytes."""
    from typer.testing import CliRunner

    from mmtune.cli import app

    r = CliRunner().invoke(app, ["plan", "recipes/demo_counting.yaml", "--margin", margin],
                           catch_exceptions=True)
    assert r.exit_code != 0 and not isinstance(r.exception, (ValueError, OverflowError)), r.exception
    assert "--margin must be a number >= 0" in r.output
