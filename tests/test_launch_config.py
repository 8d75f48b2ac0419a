"""DeepSpeed ZeRO through accelerate: the launch files generated from the run (no hand-written file), the
shipped ZeRO-2 accelerate file kept equal to them, and a clear refusal where DeepSpeed is not installed."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from mmtune.config import load_config
from mmtune.errors import ConfigError
from mmtune.launch_config import deepspeed_config, write_launch_files
from mmtune.resolve import gpu_target, local_target, resolve_run

ROOT = Path(__file__).resolve().parents[1]


def _cfg(tmp_path, *overrides):
    p = tmp_path / "c.yaml"
    p.write_text("model:\n  name: tiny/qwen2\ndata:\n  max_length: 128\n")
    return load_config(p, [f"output_dir={tmp_path / 'run'}", *overrides])


def test_zero3_files_follow_the_run(tmp_path):
    cfg = _cfg(tmp_path, "train.strategy=zero3", "train.precision=bf16", "train.micro_batch_size=2",
               "train.grad_accum=4", "train.max_grad_norm=0.5")
    r = resolve_run(cfg, gpu_target("h100", gpus=8, nodes=2))
    ds, acc = write_launch_files(r, tmp_path / "out")
    d = json.loads(ds.read_text())
    assert d["zero_optimization"]["stage"] == 3 and d["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"]
    assert (d["bf16"]["enabled"], d["fp16"]["enabled"]) == (True, False)
    assert (d["train_micro_batch_size_per_gpu"], d["gradient_accumulation_steps"], d["gradient_clipping"]) == (2, 4, 0.5)
    a = yaml.safe_load(acc.read_text())
    assert a["distributed_type"] == "DEEPSPEED" and (a["num_processes"], a["num_machines"]) == (16, 2)
    assert a["deepspeed_config"]["deepspeed_config_file"] == str(ds.resolve())


def test_fp16_on_a_t4_gets_dynamic_loss_scaling_and_ddp_writes_nothing(tmp_path):
    r = resolve_run(_cfg(tmp_path, "train.strategy=zero2", "train.precision=bf16"), gpu_target("t4", gpus=2))
    d = deepspeed_config(r)  # bf16 unsupported on a T4: the run's own fp16 decision
    assert d["fp16"] == {"enabled": True, "loss_scale": 0, "initial_scale_power": 16} and not d["bf16"]["enabled"]
    assert write_launch_files(resolve_run(_cfg(tmp_path), gpu_target("t4", gpus=2)), tmp_path / "o") == []


def test_the_shipped_zero2_file_matches_what_the_run_generates(tmp_path):
    shipped = yaml.safe_load((ROOT / "recipes" / "accelerate" / "zero2.yaml").read_text())
    cfg = _cfg(tmp_path, "profile=cloud_zero2")
    r = resolve_run(cfg, gpu_target("a100-40gb", gpus=8))
    assert r.strategy == "zero2"
    d = deepspeed_config(r)
    assert shipped["deepspeed_config"]["zero_stage"] == d["zero_optimization"]["stage"]
    assert shipped["deepspeed_config"]["gradient_clipping"] == d["gradient_clipping"]
    assert shipped["mixed_precision"] == r.accelerate_mixed_precision and shipped["num_processes"] == 8


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is not None, reason="DeepSpeed is installed here")
def test_zero_without_deepspeed_is_refused_before_anything_is_built(tmp_path):
    from mmtune.build import make_accelerator

    cfg = _cfg(tmp_path, "train.strategy=zero2", "train.device=cpu")
    two = replace(local_target("cpu"), processes=2)  # as under torchrun with 2 processes
    with pytest.raises(ConfigError) as e:
        make_accelerator(resolve_run(cfg, two))
    assert "mmtune[deepspeed]" in e.value.fix and "train.strategy=fsdp" in e.value.fix
