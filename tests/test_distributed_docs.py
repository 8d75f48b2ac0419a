"""The multi-node launch lines: the SLURM example runs (with SLURM's own commands standing in for a
cluster) and hands torchrun arguments its own parser accepts, for a config mmtune loads; the launch lines
of docs/distributed.md parse the same way."""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "examples" / "slurm" / "train_2nodes_8gpus.sbatch"


def _torchrun_args(argv: list[str]):
    """torchrun's own parser on the arguments of `python -m torch.distributed.run ...`."""
    from torch.distributed.run import get_args_parser

    i = argv.index("torch.distributed.run") + 1
    return get_args_parser().parse_args(argv[i:])


def _check_mmtune_part(args) -> None:
    from mmtune.config import load_config

    assert args.module and args.training_script == "mmtune.cli"
    cmd, config, *overrides = args.training_script_args
    assert cmd == "train"
    cfg = load_config(config, [o for o in overrides if "=" in o])
    assert cfg.train.strategy in ("fsdp", "ddp", "zero2", "zero3", "auto")


def test_sbatch_example_hands_torchrun_valid_arguments(tmp_path):
    assert subprocess.run(["bash", "-n", str(SBATCH)]).returncode == 0
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", SBATCH.read_text(), flags=re.M))
    assert directives["nodes"] == "2" and directives["gpus-per-node"] == "8" and directives["ntasks-per-node"] == "1"
    # SLURM's commands as the cluster would answer them: srun records what it would start on each node.
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    record = tmp_path / "srun.args"
    for name, body in {"srun": f'printf "%s\\n" "$@" > {record}', "scontrol": 'printf "gpu-a\\ngpu-b\\n"'}.items():
        (bin_ / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_ / name).chmod(stat.S_IRWXU)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-[a-b]",
           "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_ID": "4242"}
    res = subprocess.run(["bash", str(SBATCH), "recipes/seed002_docvqa_mixture_8gpu.yaml", "train.max_steps=10"],
                         env=env, cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    argv = record.read_text().splitlines()
    assert argv[0] == "--kill-on-bad-exit=1"
    args = _torchrun_args(argv)
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("2", "8", "c10d")
    assert (args.rdzv_endpoint, args.rdzv_id) == ("gpu-a:29500", "4242")
    _check_mmtune_part(args)
    assert args.training_script_args[-2:] == ["train.strategy=fsdp", "train.max_steps=10"]


def test_launch_lines_in_the_docs_parse():
    doc = (ROOT / "docs" / "distributed.md").read_text()
    lines = [ln.strip() for ln in re.findall(r"^(torchrun .*|python -m torch.distributed.run .*)$", doc, flags=re.M)]
    assert len(lines) == 2  # one node x 8; two nodes x 8 (the same line on each node)
    parsed = []
    for line in lines:
        argv = shlex.split(line.replace("$HEAD_NODE", "gpu-a").replace("$JOB_ID", "7"))
        argv = ["python", "-m", "torch.distributed.run", *argv[1:]] if argv[0] == "torchrun" else argv
        parsed.append(_torchrun_args(argv))
        _check_mmtune_part(parsed[-1])
    assert [(a.nnodes, a.nproc_per_node) for a in parsed] == [("1:1", "8"), ("2", "8")]
