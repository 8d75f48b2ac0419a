"""Per-GPU memory of a data-parallel run on N GPUs, from the single-GPU trace.

The trace classifies every byte live at the peak (weights, trainable parameters, gradients, optimizer
state, activations, ...). Each strategy keeps some classes whole on every rank and shards others:

| strategy | weights | trainable | gradients | optimizer state | extra per rank |
|---|---|---|---|---|---|
| ddp | 1 | 1 | 1 | 1 | gradient buckets (a flat copy of all gradients) |
| zero2 | 1 | 1 | 1/N | 1/N | two reduce buckets |
| fsdp (full shard) | 1/N | 1/N | 1/N | 1/N | the largest wrapped unit gathered, twice (prefetch), + its gradient |
| zero3 | 1/N | 1/N | 1/N | 1/N | the same as FSDP |

Activations, logits and temporaries stay per rank (each rank runs its own micro-batch). NCCL keeps its
own buffers outside PyTorch's allocator (NCCL_BYTES per rank, added to the process total).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..launch_config import ZERO_BUCKET  # elements: the reduce buckets of mmtune's DeepSpeed configs

NCCL_BYTES = 300 << 20


@dataclass
class Sharded:
    peak_allocated: int
    nccl_bytes: int
    breakdown: dict  # per GPU: the sharded classes at 1/N, the strategy's buffers added


SHARDED = {"ddp": (), "zero2": ("gradients", "optimizer_state"),
           "zero3": ("weights", "trainable_parameters", "gradients", "optimizer_state"),
           "fsdp": ("weights", "trainable_parameters", "gradients", "optimizer_state")}
STRATEGIES = tuple(SHARDED)


def shard(breakdown: dict, peak_allocated: int, *, strategy: str, n: int, trainable_numel: int,
          largest_unit_bytes: int, grad_bytes_per_elem: int = 4) -> Sharded:
    if n <= 1:
        return Sharded(peak_allocated, 0, dict(breakdown))
    if strategy not in STRATEGIES:
        from ..errors import ConfigError

        raise ConfigError(f"unknown strategy {strategy!r}", where="--strategy", fix="one of " + ", ".join(STRATEGIES))
    extra = {}
    grads_all = trainable_numel * grad_bytes_per_elem
    if strategy == "ddp":
        extra["ddp_buckets"] = grads_all
    elif strategy == "zero2":
        extra["zero_buckets"] = 2 * min(trainable_numel, ZERO_BUCKET) * grad_bytes_per_elem
    else:
        extra["gathered_units"] = 2 * largest_unit_bytes + largest_unit_bytes
    per_gpu = dict(breakdown)
    for k in SHARDED[strategy]:
        per_gpu[k] = breakdown.get(k, 0) - breakdown.get(k, 0) * (n - 1) // n
    saved = sum(breakdown.get(k, 0) - per_gpu[k] for k in SHARDED[strategy])
    per_gpu.update(extra)
    return Sharded(peak_allocated - saved + sum(extra.values()), NCCL_BYTES, per_gpu)
