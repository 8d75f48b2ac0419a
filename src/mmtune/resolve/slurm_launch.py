"""A SLURM step whose tasks do not add up to one mmtune run, refused before anything is built.

mmtune's SLURM launch (examples/slurm/train_2nodes_8gpus.sbatch) is one srun task per node, each running torchrun
with one process per GPU. srun's own step variables (set in every task it starts, not in the batch script's body)
say what srun started, and torchrun's (WORLD_SIZE, LOCAL_WORLD_SIZE, TORCHELASTIC_RUN_ID) what it was told. Three
launches from public threads do not agree, and each failed late or not at all:

- srun with several tasks and no launcher in between (`srun --ntasks-per-node 8 mmtune train ...`): no WORLD_SIZE,
  so each task is a one-process run of its own. Locally they fight over output_dir's lock (the error names the
  other process, not the launch); on node-local disks every node trains its own copy on one GPU.
- torchrun inside an srun step with several tasks per node: each of a node's tasks starts its own torchrun, so the
  node runs tasks x nproc_per_node processes on its GPUs; the extra agents wait at the rendezvous or join it as
  further "nodes".
- torchrun's node count (WORLD_SIZE / LOCAL_WORLD_SIZE: its --nnodes) unlike srun's tasks: `--nnodes 1` on each of
  two nodes makes two separate runs writing one output_dir (or waits forever for nodes that are not coming).

A plain `mmtune train` in the batch script's body, or srun with one task, is one run and passes.
"""

from __future__ import annotations

import os

EXAMPLE = "examples/slurm/train_2nodes_8gpus.sbatch"


def _int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else None


def slurm_step_problem() -> tuple[str, str, str] | None:
    """(what is wrong, where, the fix) when this process's srun step is not one mmtune run, else None."""
    tasks, nodes = _int("SLURM_STEP_NUM_TASKS"), _int("SLURM_STEP_NUM_NODES") or 1
    if tasks is None or tasks <= 1:
        return None
    started = f"srun started {tasks} tasks on {nodes} node(s) (SLURM_STEP_NUM_TASKS={tasks}, SLURM_STEP_NUM_NODES={nodes})"
    fix = (f"one srun task per node running torchrun with one process per GPU, as {EXAMPLE} does: srun "
           f"--ntasks-per-node=1 python -m torch.distributed.run --nnodes {nodes} --nproc_per_node GPUS_PER_NODE "
           "--rdzv_backend c10d --rdzv_endpoint HEAD_NODE:29500 -m mmtune.cli train CONFIG")
    world = _int("WORLD_SIZE")
    if world is None:
        return (f"{started} and none of them was started by a launcher (no WORLD_SIZE: no torchrun / accelerate "
                f"launch between srun and mmtune), so each task would be a separate one-process run of the same "
                f"config, all writing one output_dir", "SLURM_STEP_NUM_TASKS (srun's tasks)", fix)
    if "TORCHELASTIC_RUN_ID" not in os.environ:  # ranks set from SLURM's own variables, one task per process
        return None
    if tasks > nodes:
        return (f"{started} and each task ran torchrun: every node runs {tasks // nodes if tasks % nodes == 0 else 'several'} "
                f"torchrun(s), each starting its own processes per GPU, so a node's GPUs get more processes than "
                f"they have and the extra torchruns wait at the rendezvous or join it as further nodes",
                "SLURM_STEP_NUM_TASKS (srun's tasks; --ntasks-per-node)", fix)
    local = _int("LOCAL_WORLD_SIZE") or world
    agents = max(1, world // max(1, local))
    if agents != tasks:
        return (f"{started}, one torchrun each, but torchrun was told of {agents} node(s) (WORLD_SIZE={world}, "
                f"LOCAL_WORLD_SIZE={local}: its --nnodes), so the nodes would not train as one run (separate runs "
                f"writing one output_dir, or a rendezvous waiting for nodes that are not coming)",
                "torchrun --nnodes (WORLD_SIZE / LOCAL_WORLD_SIZE)",
                fix.replace(f"--nnodes {nodes}", "--nnodes $SLURM_JOB_NUM_NODES"))
    return None
