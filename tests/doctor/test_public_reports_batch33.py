"""Broken setups from the thirty-third batch of public bug reports (docs/doctor.md, "Public bug reports, batch 33:
what a run shows: logged loss, steps, learning rate, trackers and reports"): the learning rate a step logs, what a
step counts, trackers that cannot start (not installed, no credentials), logs after a killed and resumed run. Each
is rebuilt on a tiny twin trained for real (or a config through the doctor's fast checks) and read back from what
the user reads: metrics.jsonl, TensorBoard's events, report.html, the doctor's findings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doctor_helpers import sums_jsonl


def _base(folder: Path) -> Path:
    """A tiny Qwen2 model folder as save_pretrained writes it."""
    from mmtune.models.tiny import build_tiny

    model, tok = build_tiny("tiny/qwen2", seed=0)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _config(tmp_path: Path, name: str = "run", train: dict | None = None, **top):
    import yaml

    from mmtune.config import load_config

    tree = {"output_dir": str(tmp_path / name), "model": {"name": str(_base(tmp_path / "base")),
                                                           "gradient_checkpointing": False},
            "data": {"train": sums_jsonl(tmp_path, 16), "max_length": 64},
            "adapter": {"method": "lora", "r": 4, "dropout": 0.0},
            "train": {"max_steps": 4, "micro_batch_size": 2, "grad_accum": 2, "lr": 0.01, "precision": "fp32",
                      "device": "cpu", "warmup_steps": 2, "scheduler": "cosine", "seed": 0, "save_every": 4,
                      **(train or {})},
            "eval": {"every": None}, "logging": {"tensorboard": False}, **top}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return load_config(path, [])


def _rows(run: Path, kind: str = "train") -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind]


# ----------------------------------------------------------------------------- the learning rate a step logs
# https://github.com/huggingface/transformers/issues/35942 (fixed by https://github.com/huggingface/transformers/pull/36973),
# https://github.com/OpenNMT/OpenNMT-py/issues/1666, https://github.com/pytorch/pytorch/issues/22107: the logged
# learning rate is read after the scheduler stepped, so it is the next step's: step 1 of a warmup shows step 2's
# rate, and the last step of a decay to zero shows 0 though it trained at a rate above 0.
def test_each_step_logs_the_learning_rate_its_update_used(tmp_path):
    from mmtune.build import build_run
    from mmtune.train.loop import train
    from mmtune.train.schedule import lr_factor

    cfg = _config(tmp_path)
    train(build_run(cfg))
    rows = _rows(Path(cfg.output_dir))
    # one row per optimizer step (grad_accum=2 micro-batches each), not per micro-batch
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    used = [0.01 * lr_factor(s - 1, warmup=2, total=4, kind="cosine") for s in (1, 2, 3, 4)]
    assert used[0] == pytest.approx(0.005) and used[-1] > 0  # warmup's first step is half the rate, never 0
    assert [r["lr"] for r in rows] == pytest.approx(used, rel=1e-6)


# ----------------------------------------------------------------------------- trackers that cannot start
# https://github.com/unslothai/unsloth/issues/1914, https://github.com/OptimalScale/LMFlow/issues/436,
# https://github.com/ByteDance-Seed/VeOmni/issues/284, https://github.com/ultralytics/yolov5/issues/2848: "wandb.errors.
# UsageError: api_key not configured (no-tty)" from wandb.init when training starts; a tracker that is not installed
# (https://github.com/Eiztrips/ai-responder/issues/8: "TensorBoardCallback requires tensorboard to be installed").
# mmtune started its trackers in the loop, after the model was loaded, and the doctor said nothing.
def _fast_findings(tmp_path, **logging):
    import yaml

    from mmtune.doctor.runner import run_doctor

    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "run"), "model": {"name": "tiny/qwen2"},
                                    "data": {"train": sums_jsonl(tmp_path)}, "logging": logging}))
    # the fast checks are what `mmtune train` runs before it loads anything
    return [f for f in run_doctor(path, [], fast=True).findings if f.code == "MM278"]


def test_mm278_a_tracker_that_is_not_installed_stops_the_run_before_the_model_loads(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # not importable, whatever this environment has
    monkeypatch.setitem(sys.modules, "mlflow", None)
    found = _fast_findings(tmp_path, wandb=True, mlflow=True)
    assert [(f.severity, f.where) for f in found] == [("error", "logging.wandb"), ("error", "logging.mlflow")]
    assert "wandb is not installed" in found[0].message and "logging.wandb=false" in found[0].fix
    assert _fast_findings(tmp_path / "off") == []  # the defaults: TensorBoard, a dependency of mmtune


def test_mm278_wandb_without_an_api_key_is_said_before_training(tmp_path, monkeypatch):
    """wandb is installed (a package folder on the path: the check reads the environment, not wandb), and no key
    is set: an error under pytest (no terminal, as in a batch job); a netrc entry or WANDB_MODE=offline: silent."""
    pkg = tmp_path / "site" / "wandb"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DISABLED", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    netrc = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc))  # no such file: never logged in
    (found,) = _fast_findings(tmp_path, wandb=True)
    assert found.severity == "error" and "api_key not configured (no-tty)" in found.message
    assert "WANDB_API_KEY=" in found.fix and "WANDB_MODE=offline" in found.fix
    netrc.write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")  # as `wandb login` writes
    netrc.chmod(0o600)
    assert _fast_findings(tmp_path, wandb=True) == []
    netrc.unlink()
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert _fast_findings(tmp_path, wandb=True) == []


# ----------------------------------------------------------------------------- logs of a killed and resumed run
# https://github.com/wandb/wandb/issues/4482, https://github.com/allenai/tango/issues/152 ("Step must only increase in
# log calls ... dropping"), https://github.com/JiahuiYu/generative_inpainting/issues/466 (TensorBoard curves overlap
# after a resume), https://github.com/huggingface/transformers/pull/21478 (the epoch after a resume): steps logged
# after the last checkpoint are logged again by the resumed run. Pinned: each step is in metrics.jsonl and in
# TensorBoard once, with the rate and loss of the run that finished, and report.html draws the whole run.
def test_a_killed_and_resumed_run_logs_every_step_once_and_reports_the_whole_run(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    cfg = _config(tmp_path, train={"max_steps": 6, "save_every": 2}, logging={"tensorboard": True})
    assert train(build_run(cfg), stop_after=3) is None  # killed after step 3: checkpoint-2 is the last one
    out = Path(cfg.output_dir)
    assert [r["step"] for r in _rows(out)] == [1, 2, 3]
    train(build_run(load_config(out / "config.resolved.yaml", [])))
    rows = _rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/lr")] == [1, 2, 3, 4, 5, 6]
    assert [e.value for e in events.Scalars("train/lr")] == pytest.approx([r["lr"] for r in rows], rel=1e-6)
    assert all(r["epoch"] == (r["step"] - 1) // 4 for r in rows)  # 16 records / (2 x 2) = 4 steps an epoch
    # `mmtune report RUN`: the curves hold every step once, the killed process's and the resumed one's
    from mmtune.report import write_report
    from mmtune.report.collect import read_run

    assert write_report([out]).name == "report.html" and (out / "plots" / "lr.svg").exists()
    drawn = read_run(out).train
    assert [s for s, _ in drawn["loss"]] == [1, 2, 3, 4, 5, 6] and [s for s, _ in drawn["lr"]] == [1, 2, 3, 4, 5, 6]


# ----------------------------------------------------------------------------- a small loss shown as 0.0000
# https://github.com/huggingface/transformers/pull/42104 (closes transformers#38032: the logged loss rounded to 4
# decimals), https://github.com/ACEsuit/mace/issues/646, https://github.com/Canjie-Luo/MORAN_v2/issues/17: a loss
# below 5e-5 printed and charted as 0. mmtune's display keeps 4 significant digits and metrics.jsonl the float.
def test_a_small_loss_is_shown_with_its_digits_not_as_zero():
    import io

    from rich.console import Console

    from mmtune.train.progress import Progress

    buf = io.StringIO()
    with Progress(total=10, out=Console(file=buf, force_terminal=False, width=200)) as bar:
        bar.update(10, loss=3.2e-05, lr=2e-4, tokens_per_s=1000.0)
    assert "loss 3.2e-05" in buf.getvalue()
