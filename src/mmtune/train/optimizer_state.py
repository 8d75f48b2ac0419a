"""The optimizer state a resume loads, when the checkpoint was written by another train.optimizer.

Each optimizer keeps its own per-parameter state under its own names: torch's AdamW `exp_avg` / `exp_avg_sq`,
bitsandbytes' 32-bit and paged AdamW `state1` / `state2`, its 8-bit ones quantized blocks with their `qmap` /
`absmax`, SGD a `momentum_buffer`. `load_state_dict` checks only the groups' sizes, so another optimizer's
state loads without a word and the first step fails on a missing name (bitsandbytes: `KeyError: 'state1'`
after `adamw` -> `adamw_8bit`) or steps with a stray state (`adamw` -> `sgd`: the Adam moments sit unused
beside a fresh momentum, and are saved again). A change of optimizer reaches here only when accepted
(train.accept_changes, the resume guard): the trained weights, the schedule and the data position carry on,
and the new optimizer starts from a fresh state, said once.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT = "adamw"  # train.optimizer of a checkpoint whose config does not name one (the schema's default)


def saved_optimizer(ckpt: Path) -> str:
    """train.optimizer of the run that wrote `ckpt` (its config.json), or the default where it does not say."""
    from .resume_guard import saved_config

    saved = saved_config(ckpt) or {}
    train = saved.get("train") if isinstance(saved.get("train"), dict) else {}
    name = train.get("optimizer", DEFAULT)
    return name if isinstance(name, str) else DEFAULT


def load_optimizer_state(run, ckpt: Path, state: dict) -> None:
    """Load the checkpoint's optimizer state into `run.optimizer`, unless another optimizer wrote it."""
    was, now = saved_optimizer(ckpt), run.cfg.train.optimizer
    if was == now:
        run.optimizer.load_state_dict(state["optimizer"])
        return
    if run.accelerator.is_main_process:
        from ..console import console

        console.print(f"[yellow]note:[/] {ckpt.name} holds the state of train.optimizer={was}; this run steps with "
                      f"{now}, whose state is of another kind: its moments start fresh from the trained weights "
                      "(the schedule and data position carry on)")
