"""The parts of a checkpoint every rank writes: sharded state through torch.distributed.checkpoint, and
each rank's RNG.

Under `train.strategy=fsdp` the trainable weights and the optimizer state are sharded across ranks: no
one process holds them, so each rank writes its own shards into `sharded/` (DCP's format: one file per
rank plus `.metadata`). DCP reshards on load, so a checkpoint written by 2 ranks resumes on 1 (a plain
model) or on 4. Frozen weights are not saved: they are the base model's, rebuilt from its config.

Every rank's RNG (python, numpy, torch, CUDA) is saved as `rng/rank-R.json` + `rng/rank-R.safetensors`
(no pickle: train/state_files.py; an earlier checkpoint's `rng/rank-R.pt` is read through the guarded
converter of train/legacy_state.py): ranks draw different random numbers (LoRA dropout on different
records), so resuming all ranks from rank 0's state would make a resumed run differ from the straight
one. On a different world size the saved states no longer match the ranks: rank R takes its own file if
there is one, else the main state's RNG, and the run says so.
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

    _guard(ckpt)
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

    _guard(ckpt)
    sd = get_model_state_dict(model, options=_state_dict_options())
    state = {"model": sd}
    dcp.load(state, checkpoint_id=str(ckpt / SHARDED_DIR))
    set_model_state_dict(model, state["model"], options=_state_dict_options(strict=False))


def _guard(ckpt: Path) -> None:
    """DCP unpickles `.metadata` with code execution allowed: its globals are checked first (pickle_gate.py)."""
    from .pickle_gate import DCP_GLOBALS, guard_folder

    guard_folder(Path(ckpt) / SHARDED_DIR, ".metadata", DCP_GLOBALS, Path(ckpt))


def has_sharded(ckpt: Path) -> bool:
    return (Path(ckpt) / SHARDED_DIR / ".metadata").is_file()


def save_rank_rng(folder: Path, rank: int, world: int, state: dict) -> None:
    from .state_files import write_state

    (folder / RNG_DIR).mkdir(exist_ok=True)
    write_state(folder / RNG_DIR, f"rank-{rank}", {"rank": rank, "world_size": world, **state})


def rank_rng(ckpt: Path, rank: int, world: int) -> tuple[dict | None, str | None]:
    """(this rank's saved RNG state or None, a note when the world size changed since the save)."""
    from ..errors import MMTuneError
    from .legacy_state import LegacyStateRefused, read_legacy_state
    from .state_files import StateFormatError, has_state, read_state

    folder = Path(ckpt) / RNG_DIR
    legacy = folder / f"rank-{rank}.pt"
    try:
        if has_state(folder, f"rank-{rank}"):
            state = read_state(folder, f"rank-{rank}")
        elif legacy.is_file():
            state = read_legacy_state(legacy)
        else:
            return None, None
        if not isinstance(state, dict):
            raise StateFormatError(f"rank-{rank}'s RNG state is a {type(state).__name__}, not a dict")
    except (StateFormatError, LegacyStateRefused) as e:
        raise MMTuneError(f"cannot resume from {Path(ckpt).name}: {RNG_DIR}/{e}", where=str(folder),
                          fix="start over with train.resume=false, or move this checkpoint out of the run folder "
                              "to resume from the one before") from None
    note = None
    if state.get("world_size") != world:
        note = (f"the checkpoint was written by {state.get('world_size')} processes and resumes on {world}: "
                "random draws (dropout) continue from the saved ranks' states where they exist")
    return state, note
