"""train.strategy: one decision in the resolved run (auto weighed by model size, GPU count and memory),
the same for plan and doctor; combinations that cannot work refused with the alternative."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmtune.config import load_config
from mmtune.errors import ConfigError
from mmtune.resolve import gpu_target, resolve_run

QWEN7B = "Qwen/Qwen2-VL-7B-Instruct"  # an embedded public config: sized without a download


def _cfg(tmp_path: Path, *overrides: str):
    p = tmp_path / "c.yaml"
    p.write_text("model:\n  name: tiny/qwen2\ndata:\n  max_length: 128\ntrain:\n  precision: bf16\n")
    return load_config(p, list(overrides))


def _strategy(cfg, gpu: str, gpus: int):
    d = resolve_run(cfg, gpu_target(gpu, gpus=gpus)).decision("train.strategy")
    return d.value, d.reason


def test_auto_keeps_a_copy_per_gpu_while_it_fits_and_shards_when_it_does_not(tmp_path):
    assert _strategy(_cfg(tmp_path), "a100-80gb", 1) == ("ddp", "auto: one process (nothing to share)")
    # 8.3 B parameters, LoRA, bf16: ~17 GiB per copy, under half of 80 GiB -> ddp; over half of 24 GiB -> fsdp
    value, why = _strategy(_cfg(tmp_path, f"model.name={QWEN7B}"), "a100-80gb", 8)
    assert value == "ddp" and "8.3 B parameters" in why and "fit whole on each" in why
    value, why = _strategy(_cfg(tmp_path, f"model.name={QWEN7B}"), "l4", 8)
    assert value == "fsdp" and "sharded over 8 GPUs" in why
    # A full fine-tune of the same model (fp32 master weights, gradients, Adam) no longer fits one 80 GB copy.
    value, why = _strategy(_cfg(tmp_path, f"model.name={QWEN7B}", "adapter.method=full"), "a100-80gb", 8)
    assert value == "fsdp"


def test_requested_strategy_is_kept_and_recorded(tmp_path):
    r = resolve_run(_cfg(tmp_path, "train.strategy=zero3"), gpu_target("h100", gpus=4, nodes=2))
    assert r.strategy == "zero3" and r.cfg.train.strategy == "zero3"
    assert r.decision("train.strategy").line() == "train.strategy: zero3 (requested)"
    assert r.target.processes == 8 and "x8 on 2 nodes" in r.target.describe()
    assert r.to_dict()["strategy"] == "zero3"


def test_qlora_is_sharded_by_fsdp2_not_zero3_and_says_what_works(tmp_path):
    with pytest.raises(ConfigError) as e:
        resolve_run(_cfg(tmp_path, "adapter.method=qlora", "train.strategy=zero3"), gpu_target("a100-80gb", gpus=2))
    assert e.value.where == "train.strategy" and "train.strategy=ddp" in e.value.fix and "fsdp" in e.value.fix
    r = resolve_run(_cfg(tmp_path, "adapter.method=qlora"), gpu_target("a100-80gb", gpus=2))
    assert r.strategy == "ddp" and "qlora" in r.decision("train.strategy").reason
    # FSDP2: the 4-bit data stored in the compute dtype (bf16 on an A100), so it shards (resolve/quantization.py)
    f = resolve_run(_cfg(tmp_path, "adapter.method=qlora", "train.strategy=fsdp"), gpu_target("a100-80gb", gpus=2))
    assert f.strategy == "fsdp" and f.cfg.adapter.bnb_4bit_quant_storage == "bf16"
    for s in ("fsdp", "zero3"):  # int8 weights: sharded by neither
        with pytest.raises(ConfigError, match="int8"):
            resolve_run(_cfg(tmp_path, "adapter.method=lora8bit", f"train.strategy={s}"), gpu_target("a100-80gb", gpus=2))


def test_staged_unfreezing_is_refused_under_deepspeed(tmp_path):
    stages = "train.stages=[{until: 2, train: [projector]}, {train: [projector, decoder_lora]}]"
    with pytest.raises(ConfigError, match="stages"):
        resolve_run(_cfg(tmp_path, stages, "train.strategy=zero3"), gpu_target("a100-80gb", gpus=2))


def test_plan_takes_the_runs_strategy_unless_told(tmp_path):
    from typer.testing import CliRunner

    from mmtune.cli import app

    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  name: tiny/qwen2\ndata:\n  max_length: 128\ntrain:\n  precision: fp32\n"
                   "  strategy: fsdp\n")

    def plan(*extra):
        out = CliRunner().invoke(app, ["plan", str(cfg), "--gpu", "l4", "--json", *extra])
        assert out.exit_code == 0, out.output
        return json.loads(out.stdout[out.stdout.index("{"):])

    assert plan("--gpus", "2")["strategy"] == "fsdp"
    assert plan("--gpus", "2", "--strategy", "zero2")["strategy"] == "zero2"
    two_nodes = plan("--gpus", "2", "--nodes", "2")
    assert two_nodes["gpus"] == 4 and two_nodes["strategy"] == "fsdp"
