"""The auxiliary-loss contract, the registry and the weight schedule."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

REGISTRY: dict[str, type[AuxLoss]] = {}


def register(name: str):
    """Class decorator: make an AuxLoss subclass usable as `train.aux_losses: [{name: ...}]`."""
    def wrap(cls):
        cls.name = name
        REGISTRY[name] = cls
        return cls
    return wrap


@dataclass(frozen=True)
class AuxContext:
    """Model facts a loss needs to read a batch: the image placeholder id and the processor's patch
    merge (Qwen-VL merges 2x2 patches into one token; 1 where no merge)."""

    image_token_id: int | None
    merge_size: int = 1

    @classmethod
    def of(cls, model_config, processor) -> AuxContext:
        tok = getattr(model_config, "image_token_id", None)
        if tok is None:
            tok = getattr(model_config, "image_token_index", None)
        ip = getattr(processor, "image_processor", None)
        return cls(image_token_id=tok, merge_size=int(getattr(ip, "merge_size", 1) or 1))


class AuxLoss:
    """One auxiliary loss. Subclasses set `OPTIONS` (name -> default) and implement the three methods.

    Every method that runs in the step must be traceable on fake tensors (the planner runs the same
    step): fixed shapes, no `.item()` / `bool(tensor)` / boolean-mask indexing on values.
    """

    name = ""
    OPTIONS: dict = {}
    # Extra keyword arguments for the model's forward, e.g. {"output_hidden_states": True}.
    model_kwargs: dict = {}

    def __init__(self, ctx: AuxContext, **options):
        self.ctx = ctx
        self.options = {**self.OPTIONS, **options}

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Raise ValueError for a bad option value (called at config load)."""

    def record_inputs(self, record, encoded: dict) -> dict:
        """Per-record tensors for the batch (CPU, in DataLoader workers), keys prefixed `aux_`. 1-D
        tensors as long as `input_ids` are padded per token; others are concatenated on dim 0. Must
        include `aux_<name>_has` (shape (1,), int): 1 when the record has a target."""
        raise NotImplementedError

    def placeholder_inputs(self, batch: dict) -> dict:
        """Inputs for a collated batch that has none (the planner's worst-case batch): same shapes,
        every record with a target, so the plan holds what the loss keeps."""
        raise NotImplementedError

    def __call__(self, batch: dict, output):
        """Sum over the micro-batch's records with a target of the per-record loss (fp32 scalar)."""
        raise NotImplementedError

    def has_key(self) -> str:
        return f"aux_{self.name}_has"


@dataclass
class AuxTerm:
    """A configured loss: the loss, its weight and schedule (weight 0 before `start`, then a linear
    ramp over `warmup` steps to `weight`)."""

    loss: AuxLoss
    weight: float
    start: int = 0
    warmup: int = 0

    @property
    def name(self) -> str:
        return self.loss.name

    def weight_at(self, step: int) -> float:
        """Weight for the optimizer step about to run (0-based `step`, as the LR schedule)."""
        if step < self.start:
            return 0.0
        if self.warmup > 0 and step < self.start + self.warmup:
            return self.weight * (step - self.start + 1) / self.warmup
        return self.weight


def check_spec(name: str, options: dict) -> None:
    """ValueError (shown as a config problem) for an unknown loss or option, with did-you-mean."""
    if name not in REGISTRY:
        close = difflib.get_close_matches(name, list(REGISTRY), n=1)
        raise ValueError(f"unknown auxiliary loss {name!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                         + f" (known: {', '.join(sorted(REGISTRY))})")
    known = REGISTRY[name].OPTIONS
    for key in options:
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            raise ValueError(f"unknown option {key!r} of auxiliary loss {name!r}"
                             + (f"; did you mean {close[0]!r}?" if close else "")
                             + f" (options: {', '.join(sorted(known)) or 'none'})")
    REGISTRY[name].check_options({**known, **options})


def build_terms(specs, ctx: AuxContext) -> list[AuxTerm]:
    """`train.aux_losses` -> AuxTerms (an empty list when none)."""
    return [AuxTerm(REGISTRY[s.name](ctx, **s.options), s.weight, s.start, s.warmup) for s in specs]
