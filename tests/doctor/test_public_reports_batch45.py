"""Broken setups from the forty-fifth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 45: cluster
and multi-node launches"): SLURM steps that are not one run, and the launches mmtune already handled. Each is rebuilt
with the variables srun and torchrun set (a tiny Qwen2 twin, CPU ranks); the misses are answered now.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from doctor_helpers import sums_jsonl
from test_public_reports_resume import _base

SRC = str(Path(__file__).resolve().parents[2] / "src")
_SLURM_AND_LAUNCHERS = ("SLURM_", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID",
                        "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def _config(tmp_path: Path) -> Path:
    """A two-step LoRA run of a tiny Qwen2 on the CPU, written as the yaml a user passes to `mmtune train`."""
    base = _base(tmp_path / "base")
    tree = {"output_dir": str(tmp_path / "run"), "model": {"name": str(base), "gradient_checkpointing": False},
            "data": {"train": sums_jsonl(tmp_path), "max_length": 64},
            "adapter": {"method": "lora", "r": 4, "dropout": 0.0},
            "train": {"max_steps": 2, "micro_batch_size": 2, "grad_accum": 1, "lr": 0.05, "precision": "fp32",
                      "device": "cpu", "warmup_steps": 0, "seed": 0, "save_every": 2},
            "eval": {"every": None}, "logging": {"tensorboard": False}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


@pytest.fixture
def no_launch(monkeypatch):
    """This process as started from a shell: no SLURM step, no launcher (the test runner may run inside either)."""
    for name in list(os.environ):
        if name.startswith(_SLURM_AND_LAUNCHERS):
            monkeypatch.delenv(name)
    return monkeypatch


# ----------------------------------------------------------------------------- srun without a launcher
# https://github.com/NVlabs/Long-RL/issues/20, https://github.com/facebookresearch/fairseq/issues/1855,
# https://github.com/pytorch/torchtitan/issues/1749, https://github.com/Lightning-AI/pytorch-lightning/issues/6206:
# `srun --ntasks-per-node 8 python train.py` starts 8 processes that are not one job unless the program reads SLURM's
# variables. mmtune reads torchrun's: each srun task was a one-process run of its own. Rebuilt here as two tasks of
# one step: one trained alone on its one device, the other stopped on output_dir's lock ("in use by another mmtune
# run"), which names a PID, not the launch.

def test_srun_tasks_without_a_launcher_are_refused_at_start(tmp_path):
    cfg = _config(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SLURM_AND_LAUNCHERS)}
    env.update(PYTHONPATH=SRC, OMP_NUM_THREADS="1", SLURM_STEP_NUM_TASKS="2", SLURM_STEP_NUM_NODES="1",
               SLURM_PROCID="0", SLURM_LOCALID="0")
    res = subprocess.run([sys.executable, "-m", "mmtune.cli", "train", str(cfg)], capture_output=True, text=True,
                         env=env, timeout=600)
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode != 0, out[-2000:]
    assert "srun started 2 tasks on 1 node(s)" in out and "no WORLD_SIZE" in out, out[-2000:]
    assert "examples/slurm/train_2nodes_8gpus.sbatch" in out and "--ntasks-per-node=1" in out
    assert not (tmp_path / "run" / "checkpoint-2").exists()  # refused before anything was built or trained


# ----------------------------------------------------------------------------- torchrun inside srun
# https://github.com/facebookresearch/fairseq/issues/1855 (`srun --ntasks-per-node=8` around a launcher),
# https://github.com/InternLM/xtuner/issues/366, https://github.com/tunib-ai/oslo/pull/150 (tasks per node read as
# nodes: "Expected all tensors to be on the same device"), https://github.com/NVIDIA/nvidia-resiliency-ext/issues/142
# (a torchrun line whose nodes did not match: the run hung): a node's several srun tasks each start a torchrun, or
# torchrun's --nnodes is not srun's node count, so the nodes are not one run.

def _as_torchrun_rank(monkeypatch, world: int, local: int):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "4242")
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")


def test_several_torchruns_per_node_are_refused_at_start(no_launch):
    from mmtune.errors import ConfigError
    from mmtune.resolve import local_target

    _as_torchrun_rank(no_launch, world=8, local=2)  # 4 torchruns of 2 joined one rendezvous...
    no_launch.setenv("SLURM_STEP_NUM_TASKS", "4")   # ...started as 2 srun tasks on each of 2 nodes
    no_launch.setenv("SLURM_STEP_NUM_NODES", "2")
    with pytest.raises(ConfigError) as e:
        local_target("cpu")
    assert "every node runs 2 torchrun(s)" in str(e.value) and "--ntasks-per-node" in e.value.where
    assert "--nnodes 2" in e.value.fix


def test_torchrun_told_of_fewer_nodes_than_srun_started_is_refused_at_start(no_launch):
    from mmtune.errors import ConfigError
    from mmtune.resolve import local_target

    _as_torchrun_rank(no_launch, world=2, local=2)  # torchrun --nnodes 1 --nproc_per_node 2, on each of 2 nodes
    no_launch.setenv("SLURM_STEP_NUM_TASKS", "2")
    no_launch.setenv("SLURM_STEP_NUM_NODES", "2")
    with pytest.raises(ConfigError) as e:
        local_target("cpu")
    assert "torchrun was told of 1 node(s)" in str(e.value) and "$SLURM_JOB_NUM_NODES" in e.value.fix


def test_launches_that_are_one_run_pass(no_launch):
    from mmtune.resolve import local_target

    assert local_target("cpu").processes == 1  # a plain `mmtune train` in the sbatch body (no step variables)
    no_launch.setenv("SLURM_STEP_NUM_TASKS", "1")  # srun with one task
    no_launch.setenv("SLURM_STEP_NUM_NODES", "1")
    assert local_target("cpu").processes == 1
    # the sbatch example: one task per node, torchrun --nnodes 2 --nproc_per_node 8
    no_launch.setenv("SLURM_STEP_NUM_TASKS", "2")
    no_launch.setenv("SLURM_STEP_NUM_NODES", "2")
    _as_torchrun_rank(no_launch, world=16, local=8)
    assert local_target("cpu").processes == 16
    # one srun task per GPU with the ranks taken from SLURM's own variables (no torchrun): one run of 16 ranks
    no_launch.delenv("TORCHELASTIC_RUN_ID")
    no_launch.setenv("SLURM_STEP_NUM_TASKS", "16")
    assert local_target("cpu").processes == 16
