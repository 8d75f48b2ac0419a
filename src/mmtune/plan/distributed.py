"""Per-GPU memory of a data-parallel run on N GPUs, from the single-GPU trace.

The trace classifies every byte live at the peak (weights, trainable parameters, gradients, optimizer
state, activations, ...). Each strategy keeps some classes whole on every rank and shards others:

| strategy | weights | trainable | gradients | optimizer state | extra per rank |
|---|---|---|---|---|---|
| ddp | 1 | 1 | 1 | 1 | gradient buckets (a flat copy of all gradients) |
| zero2 | 1 | 1 | 1/N | 1/N | two reduce buckets |
| fsdp (FSDP2) | 1/N | 1/N | 1/N; 1 under accumulation | 1/N | the root whole, two units gathered, a reduce-scatter buffer |
| zero3 | 1/N | 1/N | 1/N | 1/N | the largest unit gathered twice (prefetch) + its gradient |

FSDP (mmtune's FSDP2 run, `sharding.py`; checked against real 2-rank CPU runs by
benchmarks/fsdp_plan_accuracy.py), what each rank holds beyond its shards:
- the root unit (everything outside the wrapped blocks: embeddings, lm_head, norms, projector, patch
  embedding) is all-gathered at the first forward and kept unsharded until its backward ends (FSDP2
  does not reshard the root after forward);
- two wrapped units gathered at once: the unit running and the next one, prefetched (backward), or a
  unit's flat all-gather buffer next to the per-parameter copies it is split into (forward);
- the reduce-scatter input: a unit's gradients copied into one flat fp32 buffer before they are freed;
- gradient accumulation: mmtune syncs gradients on the last micro-batch only
  (`set_requires_gradient_sync(False)` before), and FSDP2 keeps the earlier micro-batches' gradients
  unsharded (`unsharded_accumulated_grad`) until then, so with accumulation > 1 the gradients stay
  whole at the peak; they are 1/N only when every micro-batch reduces (accumulation 1).
Gathered weights travel in the compute dtype (the mixed-precision policy's param_dtype).

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


@dataclass
class Units:
    """What FSDP / ZeRO-3 gather, in bytes as gathered (compute dtype): the largest wrapped unit, the
    root (what no unit holds), and the largest unit's trainable parameters (fp32 gradient bytes)."""
    largest: int
    root: int = 0
    largest_trainable_grad: int = 0


SHARDED = {"ddp": (), "zero2": ("gradients", "optimizer_state"),
           "zero3": ("weights", "trainable_parameters", "gradients", "optimizer_state"),
           "fsdp": ("weights", "trainable_parameters", "gradients", "optimizer_state")}
STRATEGIES = tuple(SHARDED)


def fsdp_units(model, family, compute_elem: int | None) -> Units:
    """The units `mmtune train` wraps (sharding.shard_units: one per block of the decoder and the towers),
    the root being every parameter outside them. `compute_elem`: bytes per gathered floating element
    (2 under fp16 / bf16 mixed precision), None: as stored."""
    from ..sharding import shard_units

    def gathered(params) -> int:
        return sum(p.numel() * (compute_elem if compute_elem and p.is_floating_point() else p.element_size())
                   for p in params)

    units = shard_units(model, family)
    inside = {id(p) for _, u in units for p in u.parameters()}
    largest = max(units, key=lambda u: gathered(u[1].parameters()), default=None)
    return Units(largest=gathered(largest[1].parameters()) if largest else 0,
                 root=gathered(p for p in model.parameters() if id(p) not in inside),
                 largest_trainable_grad=4 * sum(p.numel() for p in largest[1].parameters() if p.requires_grad)
                 if largest else 0)


def shard(breakdown: dict, peak_allocated: int, *, strategy: str, n: int, trainable_numel: int,
          units: Units, grad_accum: int = 1, grad_bytes_per_elem: int = 4) -> Sharded:
    if n <= 1:
        return Sharded(peak_allocated, 0, dict(breakdown))
    if strategy not in STRATEGIES:
        from ..errors import ConfigError

        raise ConfigError(f"unknown strategy {strategy!r}", where="--strategy", fix="one of " + ", ".join(STRATEGIES))
    extra = {}
    sharded = SHARDED[strategy]
    grads_all = trainable_numel * grad_bytes_per_elem
    if strategy == "ddp":
        extra["ddp_buckets"] = grads_all
    elif strategy == "zero2":
        extra["zero_buckets"] = 2 * min(trainable_numel, ZERO_BUCKET) * grad_bytes_per_elem
    elif strategy == "fsdp":
        extra["unsharded_root"] = units.root
        extra["gathered_units"] = 2 * units.largest
        extra["reduce_scatter_buffer"] = units.largest_trainable_grad
        if grad_accum > 1:  # unsharded accumulated gradients until the last micro-batch reduces them
            sharded = tuple(k for k in sharded if k != "gradients")
    else:
        extra["gathered_units"] = 2 * units.largest + units.largest
    per_gpu = dict(breakdown)
    for k in sharded:
        per_gpu[k] = breakdown.get(k, 0) - breakdown.get(k, 0) * (n - 1) // n
    saved = sum(breakdown.get(k, 0) - per_gpu[k] for k in sharded)
    per_gpu.update(extra)
    return Sharded(peak_allocated - saved + sum(extra.values()), NCCL_BYTES, per_gpu)
