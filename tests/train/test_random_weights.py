"""model.weights=random: `mmtune train` on a model known only by its config (no weights files), the decision said
in the resolved run, the doctor content with the config alone, and export refusing the result."""

import json
import math

import pytest

from mmtune.errors import MMTuneError
from tests.train.conftest import config_only_folder


def test_train_from_random_weights_says_so_and_export_refuses(tmp_path):
    import yaml

    from mmtune.commands.train import run_training
    from mmtune.export import export

    folder = config_only_folder(tmp_path / "m")
    out = tmp_path / "run"
    overrides = [f"model.name={folder}", "model.weights=random", "data.train=synthetic:arithmetic",
                 "data.synthetic_train_size=8", "data.max_length=64", "adapter.method=lora", "train.max_steps=2",
                 "train.micro_batch_size=2", "train.precision=fp32", "train.device=cpu", "logging.tensorboard=false",
                 f"output_dir={out}"]
    summary = run_training(None, overrides)
    assert summary["steps"] == 2
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["kind"] == "train"]
    assert losses and all(math.isfinite(x) for x in losses)
    resolved = (out / "config.resolved.yaml").read_text()
    assert "model.weights: random" in resolved and "random weights" in resolved  # the decision, as a comment line
    assert yaml.safe_load(resolved)["model"]["weights"] == "random"
    with pytest.raises(MMTuneError, match="random weights"):
        export(out)


def test_without_random_weights_the_same_folder_is_refused_for_training(tmp_path):
    from mmtune.config import load_config
    from mmtune.resolve import local_target, resolve_run

    folder = config_only_folder(tmp_path / "m")
    cfg = load_config(None, [f"model.name={folder}", "data.train=synthetic:arithmetic"])
    with pytest.raises(MMTuneError, match="weights"):
        resolve_run(cfg, local_target("cpu"), for_training=True)
    run = resolve_run(cfg.model_copy(update={"model": cfg.model.model_copy(update={"weights": "random"})}),
                      local_target("cpu"), for_training=True)
    assert any(d.key == "model.weights" and d.value == "random" for d in run.decisions)


def test_doctor_needs_only_the_config_for_random_weights(tmp_path):
    from mmtune.doctor.runner import run_doctor

    folder = config_only_folder(tmp_path / "m")
    report = run_doctor(None, [f"model.name={folder}", "model.weights=random", "data.train=synthetic:arithmetic"],
                        gpu=None, fast=True)
    assert not [f for f in report.findings if f.code == "MM024"], report.findings
    report = run_doctor(None, ["model.name=nowhere/unknown-model", "model.weights=random",
                               "data.train=synthetic:arithmetic"], gpu=None, fast=True)
    mm024 = [f for f in report.findings if f.code == "MM024"]
    assert mm024 and mm024[0].severity == "error" and "no config" in mm024[0].message
