"""Step time from the traced ops: a roofline per op on the target GPU, plus the data-parallel traffic.

Each traced op costs max(FLOPs / (peak x matmul efficiency), bytes touched / (bandwidth x bandwidth
efficiency)). FLOPs come from torch's flop registry (matmuls, convolutions, attention), counted on the
ops the step really runs (recomputation under checkpointing included, LoRA's small matmuls, the fp32
loss). Bytes are every tensor an op reads and writes; 4-bit weights add their dequantisation
(dequant_cost.py, phase "dequant"). The peak is the GPU's dense rate in the run's precision
(`GPUSpec.matmul_tflops`: fp16 / bf16 tensor cores with fp32 accumulation, or fp32). The efficiencies
are the fractions of spec peak that well-tuned training kernels reach in practice; they are
assumptions, stated here, not fitted. A per-op launch overhead covers the many tiny ops of small models.

Communication (`comm_time`, with --gpus N): ring collectives over the GPU's interconnect, each rank
sending and receiving (N-1)/N of the buffer per all-gather or reduce-scatter and twice that per
all-reduce, at COMM_EFFICIENCY of the per-direction link bandwidth. What each strategy moves per step:
- ddp: one all-reduce of the trainable gradients (fp32) per optimizer step (no_sync on the other
  micro-batches);
- zero2: a reduce-scatter of the trainable gradients per micro-batch, an all-gather of the updated
  trainable parameters per step;
- fsdp / zero3: every micro-batch all-gathers all parameters in forward and again in backward (in the
  compute dtype, as mixed precision's param_dtype does; 4-bit weights as stored); ZeRO-3 reduce-scatters
  the trainable gradients (fp32) every micro-batch, mmtune's FSDP2 loop once per step (gradient sync
  on the last micro-batch only, the others accumulate unsharded); the step all-gathers nothing more.
The gradient reduction of the last micro-batch overlaps its backward in DDP and ZeRO (bucketed), and
FSDP / ZeRO-3 prefetch the next unit's gather during compute: the step pays what exceeds the compute it
overlaps (`exposed`), never less than zero, and the full volume is reported.

Many nodes (`--gpus G --nodes M`): collectives run hierarchically, as NCCL does across nodes: within
each node over the GPUs' interconnect, then between nodes over the node link (`gpus.NODE_LINK_GBS`, or
`--node-link`), shared by the node's G GPUs. A ring over G GPUs moves (G-1)/G of the buffer per rank
inside the node; the inter-node phase moves (M-1)/M of the buffer per node (each of the G ranks sends
its 1/G share, all through the one link). The phases are priced one after the other (no pipelining
between them: an upper bound on NCCL's overlap of the two). One node gives the flat ring above exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MATMUL_EFFICIENCY = 0.6
BANDWIDTH_EFFICIENCY = 0.7
COMM_EFFICIENCY = 0.7  # NCCL ring bus bandwidth reached on large messages, as a fraction of the link
LAUNCH_S = 4e-6


@dataclass
class StepTime:
    step_time_s: float
    tokens_per_s: float
    forward_backward_s: float  # one micro-batch (dequantisation included)
    optimizer_s: float
    flops_per_step: float
    dequant_s: float = 0.0  # per step: 4-bit weights dequantized (forward, backward, recomputation)
    comm_s: float = 0.0  # per step, exposed (not hidden behind compute)
    comm: dict = field(default_factory=dict)


def _op_time(flops: int, nbytes: int, tflops: float, bandwidth_gbs: float) -> float:
    return max(flops / (tflops * 1e12 * MATMUL_EFFICIENCY), nbytes / (bandwidth_gbs * 1e9 * BANDWIDTH_EFFICIENCY)) + LAUNCH_S


def comm_volumes(strategy: str, n: int, *, grad_accum: int, trainable_bytes: int, param_bytes: int) -> dict:
    """Bytes each rank sends per optimizer step, by collective (ring algorithms)."""
    out = {"all_reduce_bytes": 0, "all_gather_bytes": 0, "reduce_scatter_bytes": 0}
    if n <= 1:
        return out
    f = (n - 1) / n
    if strategy == "ddp":
        out["all_reduce_bytes"] = int(2 * f * trainable_bytes)
    elif strategy == "zero2":
        out["reduce_scatter_bytes"] = int(f * trainable_bytes * grad_accum)
        out["all_gather_bytes"] = int(f * trainable_bytes)
    else:  # fsdp, zero3
        out["all_gather_bytes"] = int(2 * f * param_bytes * grad_accum)
        # mmtune's FSDP2 loop reduces once per step (set_requires_gradient_sync on the last micro-batch);
        # DeepSpeed's ZeRO-3 reduce-scatters every micro-batch.
        out["reduce_scatter_bytes"] = int(f * trainable_bytes * (1 if strategy == "fsdp" else grad_accum))
    return out


def comm_time(volumes: dict, link_gbs: float) -> float:
    total = sum(volumes.values())
    return total / (link_gbs * 1e9 * COMM_EFFICIENCY) if total else 0.0


def hierarchical_comm(volumes: dict, *, world: int, nodes: int, link_gbs: float, node_link_gbs: float) -> dict:
    """Intra-node and inter-node parts of one step's collectives (`volumes`: comm_volumes() on `world`
    ranks, i.e. (world-1)/world of each buffer per rank, twice for an all-reduce)."""
    total = sum(volumes.values())
    nodes = max(1, nodes)
    per_node = max(1, world // nodes)
    if not total or world <= 1:
        return {"intra_node_bytes": 0, "inter_node_bytes": 0, "intra_node_s": 0.0, "inter_node_s": 0.0}
    buffers = total * world / (world - 1)  # the buffers themselves (all-reduce counted twice)
    intra = int(buffers * (per_node - 1) / per_node)  # per rank, over the GPUs' interconnect
    inter = int(buffers * (nodes - 1) / nodes)  # per node, over the node link
    return {"intra_node_bytes": intra, "inter_node_bytes": inter,
            "intra_node_s": intra / (link_gbs * 1e9 * COMM_EFFICIENCY) if intra and link_gbs else 0.0,
            "inter_node_s": inter / (node_link_gbs * 1e9 * COMM_EFFICIENCY) if inter and node_link_gbs else 0.0}


def step_time(costs, *, steps: int, traced_micro_batches: int, grad_accum: int, tokens_per_step: int,
              tflops: float, bandwidth_gbs: float, world: int = 1, comm: dict | None = None,
              link_gbs: float = 0.0, gathers_params: bool = False, nodes: int = 1,
              node_link_gbs: float = 0.0) -> StepTime:
    """`comm`: comm_volumes(); `gathers_params` (fsdp/zero3): the traffic hides behind all the step's
    compute (prefetch), else behind the last micro-batch's backward (bucketed gradient reduction).
    `nodes` > 1: the collectives are hierarchical, the inter-node phase over `node_link_gbs` per node."""
    mb_t = opt_t = dq_t = bwd_t = 0.0
    mb_f = opt_f = 0
    for flops, nbytes, phase in costs:
        t = _op_time(flops, nbytes, tflops, bandwidth_gbs)
        if phase == "optimizer":
            opt_t += t
            opt_f += flops
        elif phase in ("forward", "loss", "backward", "dequant"):
            mb_t += t
            mb_f += flops
            if phase == "dequant":
                dq_t += t
            elif phase == "backward":
                bwd_t += t
    n_mb = max(1, steps * traced_micro_batches)
    per_mb = mb_t / n_mb
    per_opt = opt_t / max(1, steps)
    compute = per_mb * grad_accum + per_opt
    volumes = comm or {}
    if nodes > 1 and volumes:
        hier = hierarchical_comm(volumes, world=world, nodes=nodes, link_gbs=link_gbs, node_link_gbs=node_link_gbs)
        comm_full = hier["intra_node_s"] + hier["inter_node_s"]
    else:
        hier = {}
        comm_full = comm_time(volumes, link_gbs) if link_gbs else 0.0
    # What the communication can hide behind: the last micro-batch's backward (gradient reduction) or,
    # with parameter gathering (fsdp/zero3), all the micro-batches' compute.
    hide = per_mb * grad_accum if gathers_params else bwd_t / n_mb
    exposed = max(0.0, comm_full - hide)
    total = compute + exposed
    flops = mb_f / n_mb * grad_accum + opt_f / max(1, steps)
    info = dict(volumes, comm_time_s=comm_full, exposed_s=exposed, link_gbs=link_gbs, nodes=max(1, nodes),
                **(dict(hier, node_link_gbs=node_link_gbs) if hier else {})) if volumes else {}
    return StepTime(total, tokens_per_step * world / total if total else 0.0, per_mb, per_opt, flops,
                    dq_t / n_mb * grad_accum, exposed, info)
