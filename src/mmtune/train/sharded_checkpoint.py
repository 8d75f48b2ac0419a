"""The parts of a checkpoint every rank writes: sharded state through torch.distributed.checkpoint, and
each rank's RNG.

Under `train.strategy=fsdp` the trainable weights and the optimizer state are sharded across ranks: no
one process holds them, so each rank writes its own shards into `sharded/` (DCP's format: one file per
rank plus `.metadata`). DCP reshards on load, so a checkpoint written by 2 ranks resumes on 1 (a plain
model) or on 4. Frozen weights are not saved: they are the base model's, rebuilt from its config.

Every rank's RNG (python, numpy, torch, CUDA) is saved as `rng/rank-R.pt`: ranks draw different random
numbers (LoRA dropout on different records), so resuming all ranks from rank 0's state would make a
resumed run differ from the straight one. On a different world size the saved states no longer match
the ranks: rank R takes `rank-R.pt` if there is one, else rank 0's, and the run says so.
"""

from __future__ import annotations

from pathlib import Path

SHARDED_DIR = "sharded"
RNG_DIR = "rng"


def writes_sharded(run) -> bool:
    """Whether this run's checkpoints hold the sharded format (its strategy shards optimizer state)."""
    return run.resolved.strategy == "fsdp"


def _state_dict_options(**kw):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True, **kw)


def _torch_optimizer(optimizer):
    return getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps it


def save_sharded(run, folder: Path) -> None:
    """Every rank writes its shards of the trainable weights and the optimizer state (a collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(run.model, _torch_optimizer(run.optimizer), options=_state_dict_options())
    dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(folder / SHARDED_DIR))


def load_sharded(run, ckpt: Path) -> None:
    """Each rank reads the shards it owns now (any world size): trainable weights and optimizer state."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    optimizer = _torch_optimizer(run.optimizer)
    model_sd, optim_sd = get_state_dict(run.model, optimizer, options=_state_dict_options())
    state = {"model": model_sd, "optimizer": optim_sd}
    dcp.load(state, checkpoint_id=str(ckpt / SHARDED_DIR))
    set_state_dict(run.model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"],
                   options=_state_dict_options(strict=False))


def load_sharded_weights(model, ckpt: Path) -> None:
    """The trainable weights of a sharded checkpoint into a model on one process (eval, chat, export)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    sd = get_model_state_dict(model, options=_state_dict_options())
    state = {"model": sd}
    dcp.load(state, checkpoint_id=str(ckpt / SHARDED_DIR))
    set_model_state_dict(model, state["model"], options=_state_dict_options(strict=False))


def has_sharded(ckpt: Path) -> bool:
    return (Path(ckpt) / SHARDED_DIR / ".metadata").is_file()


def save_rank_rng(folder: Path, rank: int, world: int, state: dict) -> None:
    import torch

    (folder / RNG_DIR).mkdir(exist_ok=True)
    torch.save({"rank": rank, "world_size": world, **state}, folder / RNG_DIR / f"rank-{rank}.pt")


def rank_rng(ckpt: Path, rank: int, world: int) -> tuple[dict | None, str | None]:
    """(this rank's saved RNG state or None, a note when the world size changed since the save)."""
    import torch

    path = Path(ckpt) / RNG_DIR / f"rank-{rank}.pt"
    if not path.is_file():
        return None, None
    state = torch.load(path, map_location="cpu", weights_only=False)
    note = None
    if state.get("world_size") != world:
        note = (f"the checkpoint was written by {state.get('world_size')} processes and resumes on {world}: "
                "random draws (dropout) continue from the saved ranks' states where they exist")
    return state, note
