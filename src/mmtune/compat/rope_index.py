"""A model's own M-RoPE `get_rope_index`, callable without the model (sequence packing's position ids).

Qwen2-VL, Qwen2.5-VL and Qwen3-VL give media tokens 3-D (temporal, height, width) rotary positions,
computed by the inner model's `get_rope_index(input_ids, mm_token_type_ids, image_grid_thw, ...)`.
A packed row needs them per record (each record's positions restart at 0), computed where the row is
made: in the DataLoader, possibly in a spawned worker, where the model itself must not travel. The
method reads only `self.config` (the vision config's merge size, `tokens_per_second`) and the class's
own `get_vision_position_ids`; `RopeIndex` calls the class's function on a small stand-in holding the
config, so the positions are the model's own, not a copy of its arithmetic. That the method needs
nothing else of `self` is a version-sensitive fact: checked on transformers 5.23 (Qwen2-VL, Qwen2.5-VL,
Qwen3-VL), and tests/data/test_packing.py compares it with the bound method of a real model.
"""

from __future__ import annotations

import inspect

from . import CompatError, installed_version


class _Stand:
    """`self` for the class's functions: the config, and the class's other methods bound to this object."""

    def __init__(self, owner, config):
        self.config, self._owner = config, owner

    def __getattr__(self, name):
        fn = getattr(self._owner, name)
        return fn.__get__(self) if inspect.isfunction(fn) else fn


class RopeIndex:
    """`RopeIndex(owner_class, config)(encoded_record) -> (3, L)` M-RoPE position ids of one record.
    Picklable (a class and a config), so DataLoader workers can carry it."""

    ARGS = ("image_grid_thw", "video_grid_thw", "second_per_grid_ts")

    def __init__(self, owner, config):
        self.owner, self.config = owner, config
        params = inspect.signature(owner.get_rope_index).parameters  # once, not per record
        self.args = tuple(k for k in self.ARGS if k in params)

    def __call__(self, item: dict):
        import torch

        ids = item["input_ids"][None]
        types = item.get("mm_token_type_ids")
        if types is None:  # a text-only record: the model's own default is the plain count on all three axes
            return torch.arange(ids.shape[-1]).expand(3, -1).clone()
        kwargs = {k: item[k] for k in self.args if k in item}
        try:
            pos, _ = self.owner.get_rope_index(_Stand(self.owner, self.config), ids, mm_token_type_ids=types[None],
                                               **kwargs)
        except (AttributeError, TypeError) as e:
            raise CompatError(
                f"{self.owner.__name__}.get_rope_index needs more than its config in transformers "
                f"{installed_version('transformers')} ({e}); sequence packing computes each record's M-RoPE "
                "positions with it. Checked on transformers 5.23", where="data.packing",
                fix="data.packing=false, or pip install 'transformers==5.23.*'") from e
        return pos[:, 0]


def rope_index_of(model) -> RopeIndex | None:
    """The RopeIndex of a model (any wrapping: peft, DDP) whose inner model has `get_rope_index`; None
    for models with plain 1-D positions."""
    for m in model.modules():
        if callable(getattr(type(m), "get_rope_index", None)) and getattr(m, "config", None) is not None:
            return RopeIndex(type(m), m.config)
    return None
