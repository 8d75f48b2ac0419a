"""The parts of a checkpoint a DeepSpeed ZeRO run (`train.strategy` zero2 / zero3) writes on every rank.

Under ZeRO the optimizer state (zero2) and also the weights (zero3) are partitioned across ranks: no one
process holds them, so the main rank's `state.pt` cannot carry the optimizer. Each rank writes its
partition through DeepSpeed's own `save_checkpoint` into `deepspeed/` (its format: the module states once,
one optimizer-partition file per rank; frozen weights left out, they are the base model's), and resume
reads them back with `load_checkpoint`: weights, the fp32 master copy, Adam's moments, exactly.
DeepSpeed's partition files are tied to the world size that wrote them: resuming on another one is
refused with the alternative (unlike fsdp's `sharded/`, which torch.distributed.checkpoint reshards).

The loadable weights (`adapter/` or `model/`) and `trainable.safetensors` are still written by the main
rank, from the trainable weights gathered whole (ZeRO-3: accelerate's `get_state_dict`, a collective;
ZeRO-2 keeps whole weights on every rank): `mmtune eval`, `chat` and `export` read a ZeRO checkpoint
on one process like any other.
"""

from __future__ import annotations

from pathlib import Path

DEEPSPEED_DIR = "deepspeed"
TAG = "state"  # one tag per checkpoint folder: the folder itself is the step


def writes_deepspeed(run) -> bool:
    """Whether this run trains under a DeepSpeed engine (its checkpoints hold `deepspeed/`)."""
    return getattr(run.accelerator, "distributed_type", None) == "DEEPSPEED"


def has_deepspeed(ckpt: Path) -> bool:
    return (Path(ckpt) / DEEPSPEED_DIR / TAG).is_dir()


def gathered_state(run) -> tuple[dict, dict]:
    """(every weight, every trainable weight), whole, on the CPU, on the main rank (others: {}, {}).
    A collective under ZeRO-3 (the partitions gathered onto the main rank): every rank calls it."""
    trainable = [n for n, p in run.unwrapped_model().named_parameters() if p.requires_grad]
    full = run.accelerator.get_state_dict(run.model)
    if not run.accelerator.is_main_process:
        return {}, {}
    full = {n: t.detach().cpu().contiguous() for n, t in full.items()}
    return full, {n: full[n] for n in trainable}


def save_deepspeed(run, folder: Path) -> None:
    """Every rank writes its partition of the trainable state (a collective)."""
    run.model.save_checkpoint(str(folder / DEEPSPEED_DIR), tag=TAG, client_state={}, save_latest=False,
                              exclude_frozen_parameters=True)


def load_deepspeed(run, ckpt: Path, saved_world: int | None) -> None:
    """Each rank reads its partition back: trainable weights, fp32 master weights and optimizer state."""
    from ..errors import MMTuneError

    world = run.accelerator.num_processes
    if saved_world is not None and saved_world != world:
        raise MMTuneError(f"{ckpt.name} was written by {saved_world} DeepSpeed ranks and this run has {world}: "
                          "DeepSpeed's optimizer partitions are tied to the world size that wrote them",
                          where=str(ckpt / DEEPSPEED_DIR),
                          fix=f"resume on {saved_world} processes (torchrun --nproc_per_node {saved_world}), or use "
                              "train.strategy=fsdp, whose checkpoints reshard onto any world size")
    # DeepSpeed unpickles its files with code execution allowed: their globals are checked first.
    from .pickle_gate import DEEPSPEED_GLOBALS, guard_folder

    guard_folder(ckpt / DEEPSPEED_DIR, "*.pt", DEEPSPEED_GLOBALS, ckpt)
    path, _ = run.model.load_checkpoint(str(ckpt / DEEPSPEED_DIR), tag=TAG, load_module_strict=False,
                                        load_optimizer_states=True, load_lr_scheduler_states=False)
    if path is None:
        raise MMTuneError(f"DeepSpeed found no checkpoint in {ckpt / DEEPSPEED_DIR}", where=str(ckpt),
                          fix="resume from another checkpoint, or start over with train.resume=false")
