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


# ----------------------------------------------------------------------------- ranks that are not alike
# Launched here as torchrun would, one process per rank with its variables, so that each rank can be given what its
# node would have: its own disk behind output_dir, or its own copy of the config.

def _two_ranks(tmp_path: Path, cfg: Path, per_rank: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Rank 0 and rank 1 of one run (gloo, CPU) started with `mmtune train cfg` + their own key=value overrides; a
    launch that lost its port to another process is launched again on a fresh port."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
    from torchrun import BIND_FAILED

    from mmtune.serve.server import free_port

    base = {k: v for k, v in os.environ.items() if not k.startswith(_SLURM_AND_LAUNCHERS)}
    for _ in range(3):
        port = str(free_port())
        procs = []
        for rank, extra in enumerate(per_rank):
            env = {**base, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1", "RANK": str(rank), "LOCAL_RANK": str(rank),
                   "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
            procs.append(subprocess.Popen([sys.executable, "-m", "mmtune.cli", "train", str(cfg), *extra], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        results = [subprocess.CompletedProcess(p.args, p.wait(timeout=600), p.stdout.read(), "") for p in procs]
        if not any(BIND_FAILED.search(r.stdout) for r in results):
            return results
    return results


# https://github.com/axolotl-ai-cloud/axolotl/issues/884 ("No shared storage between the nodes": the worker node
# finds no checkpoint to resume), https://github.com/hiyouga/LlamaFactory/issues/2398 and
# https://github.com/hiyouga/LlamaFactory/issues/2400 (the worker node's checkpoint folders stay tmp-checkpoint-N,
# resume fails there), https://github.com/EleutherAI/gpt-neox/issues/765, https://github.com/deepspeedai/DeepSpeed/issues/5452,
# https://github.com/facebookresearch/detectron2/issues/1732: output_dir on each node's own disk. Rebuilt as the same
# run with output_dir in another folder per rank: at the base rank 1 stopped at its first save with a raw
# "FileNotFoundError: ... '/.../run'" (shutil.disk_usage) and rank 0 with gloo's "Connection closed by peer".

def test_output_dir_on_each_nodes_own_disk_is_refused_at_start(tmp_path):
    cfg = _config(tmp_path)
    (tmp_path / "node1").mkdir()
    res = _two_ranks(tmp_path, cfg, [[], [f"output_dir={tmp_path / 'node1' / 'run'}"]])
    for r in res:
        out = " ".join(r.stdout.split())
        assert r.returncode != 0 and "is not one folder for every rank: rank(s) 1" in out, out[-3000:]
        assert "Traceback" not in out and "a filesystem every node mounts" in out
    assert not (tmp_path / "run" / "checkpoint-2").exists()
    assert not list((tmp_path / "run").glob(".mmtune-rank-probe-*"))  # the marker is removed


# https://github.com/modelscope/ms-swift/issues/3695 (two hand-written scripts, one per node, that differ),
# https://github.com/facebookresearch/dora/issues/60, https://github.com/pytorch/pytorch/issues/81313: each node
# started by its own command line. Rebuilt with train.lr=0.1 on rank 1 only: at the base both ranks trained their 2
# steps and exited 0, each stepping with its own learning rate (DDP averages the gradients, not the updates).

def test_ranks_started_with_another_config_are_refused_at_start(tmp_path):
    cfg = _config(tmp_path)
    res = _two_ranks(tmp_path, cfg, [[], ["train.lr=0.1"]])
    for r in res:
        out = " ".join(r.stdout.split())
        assert r.returncode != 0, out[-3000:]
        assert "rank 1 (" in out and "was started with another config" in out and "train.lr=0.1 (rank 0: 0.05)" in out
    assert not (tmp_path / "run" / "checkpoint-2").exists()


# https://github.com/verl-project/verl/issues/701 (a library version mismatch: workers hung in a broadcast),
# https://github.com/huggingface/accelerate/issues/412 (one node printed its NCCL version, the other did not; the run
# hung at prepare): other packages on another node. One machine cannot install two versions at once, so the ranks'
# reports are compared as the check compares them: this machine's, and the same with transformers one version back.

def test_other_library_versions_on_another_node_are_named():
    from mmtune.config.schema import RunConfig
    from mmtune.rank_agreement import _flat, disagreement, versions

    here = versions()
    assert here["torch"] and here["transformers"] and here["mmtune"]
    cfg = _flat(RunConfig.model_validate({"model": {"name": "m"}, "data": {"train": "t.jsonl"}}).model_dump(mode="json"))
    rank0 = {"host": "gpu-a", "sees": True, "config": cfg, "resolved": cfg, "versions": here}
    rank1 = {**rank0, "host": "gpu-b", "versions": {**here, "transformers": "4.57.1"}}
    assert disagreement([rank0, dict(rank0)], "/shared/run") is None
    what, where, fix = disagreement([rank0, rank1], "/shared/run")
    assert f"rank 1 (gpu-b) runs other versions than rank 0 (gpu-a): transformers 4.57.1 (rank 0: {here['transformers']})" == what
    assert "same versions on every node" in fix


# The same config decided otherwise on another node (an older GPU without bf16: fp16; flash-attn on one node only):
# the check compares the resolved runs too, and says the node decided it, not the command line.

def test_the_same_config_resolved_otherwise_on_another_node_is_named():
    from mmtune.config.schema import RunConfig
    from mmtune.rank_agreement import _flat, disagreement, versions

    cfg = RunConfig.model_validate({"model": {"name": "m"}, "data": {"train": "t.jsonl"}})
    given = _flat(cfg.model_dump(mode="json"))
    bf16 = _flat(cfg.model_copy(update={"train": cfg.train.model_copy(update={"precision": "bf16"})}).model_dump(mode="json"))
    fp16 = {**bf16, "train.precision": "fp16"}
    rank0 = {"host": "gpu-a", "sees": True, "config": given, "resolved": bf16, "versions": versions()}
    rank1 = {**rank0, "host": "gpu-b", "resolved": fp16}
    what, where, fix = disagreement([rank0, rank1], "/shared/run")
    assert "rank 1 (gpu-b) resolved the same config to another run" in what
    assert "train.precision='fp16' (rank 0: 'bf16')" in what and "config.resolved.yaml" in where
