"""The plan of `train.offload=optimizer` (resolve/offload.py): GPU memory without the offloaded state, the
host memory it takes instead, and what moving it costs per step.

GPU memory. The optimizer runs on the CPU, so its state and everything its step allocates (AdamW's
temporaries: the "optimizer" phase of the trace) never touch the GPU: the single-GPU trace is replayed
without them (`gpu_side`) before the strategy's sharding is applied. Then, per strategy (per GPU):
- fsdp (FSDP2 CPUOffloadPolicy): the sharded classes (weights, trainable parameters, gradients, optimizer
  state) live in host memory; what stays on the GPU is what FSDP gathers (the root, two units in flight,
  the reduce-scatter buffer) plus the unsharded accumulated gradients under accumulation > 1;
- zero2 / zero3 (ZeRO-Offload): the fp32 master partition, its gradients and the optimizer state on the
  host; the GPU keeps the weights (16-bit under bf16 / fp16: DeepSpeed casts the module) and the reduce
  buckets.

Host memory (pinned: page-locked, it cannot be swapped, so it must fit in RAM), per rank:
- fsdp: every shard: parameters as stored, fp32 gradients, optimizer state, each 1/N;
- zero: fp32 master + fp32 gradient partition + optimizer state, each 1/N, and under ZeRO-2 a 16-bit copy of
  the partition (the buffer the update is copied back to the GPU from).
The node needs that times its GPUs, beside the processes' own memory (the doctor's MM075 checks RAM).

Time per step, added to the GPU-only estimate (which loses its GPU optimizer step):
- PCIe: bytes copied host<->GPU over the GPU's host link (gpus.host_link_gbs: PCIe generation x16, one
  direction), counted as not hidden behind compute (an upper bound: FSDP2 prefetches and DeepSpeed copies
  gradients during backward, so part of it overlaps). fsdp: each unit's shard copied to the GPU for its
  forward and again for its backward, every micro-batch, and the reduced gradient shards back once per step;
  zero: the reduced gradient partition to the host every micro-batch (DeepSpeed accumulates there), the
  updated 16-bit weights back once per step;
- the CPU optimizer step: AdamW reads weight, gradient and two moments and writes three of them (28 bytes
  per fp32 element), at an assumed HOST_ADAM_GBS of host memory bandwidth per rank for DeepSpeed's C++ Adam
  (memory-bound there), TORCH_CPU_ADAM_SLOWDOWN times slower for torch's AdamW on CPU tensors (FSDP2's
  offload steps torch's optimizer; the doctor's MM076 warns where ZeRO-Offload falls back to it).
"""

from __future__ import annotations

import copy
import types
from dataclasses import dataclass, field, replace

ADAM_BYTES_PER_ELEM = 28  # fp32: read p, g, m, v; write p, m, v
# Effective host memory bandwidth one rank's CPU optimizer step gets (GB/s): an assumption, not a catalog
# fact (the host CPU is not known from the GPU's name). benchmarks/offload_plan_accuracy.py measures the real
# step on this machine beside it; docs/distributed.md#optimizer-offload quotes both.
HOST_ADAM_GBS = 10.0
# torch's AdamW stepping CPU tensors (FSDP2 CPU offload; ZeRO-Offload without DeepSpeed's op) is this many times
# slower than DeepSpeedCPUAdam: 0.7 vs 7.1 GB/s on one 16M-element tensor, both on a shared 2-core machine
# (benchmarks/results/offload_plan_accuracy_cpu2_20261127.json, adam_throughput; 0.8 vs 6.5 in a run at another
# load): ~8-10x, 8 taken.
TORCH_CPU_ADAM_SLOWDOWN = 8.0


@dataclass
class OffloadPlan:
    mode: str  # resolved.offload: fsdp | zero-cpuadam | zero-torch
    gpu_saved_bytes: int  # per GPU, against the same run without offload
    host_bytes_per_rank: int  # pinned host memory each rank holds
    host_bytes_per_node: int
    h2d_bytes: int  # per step per GPU
    d2h_bytes: int
    host_link_gbs: float
    pcie_s: float  # (h2d + d2h) / host link: not hidden (upper bound)
    cpu_optimizer_s: float
    host_adam_gbs: float = HOST_ADAM_GBS
    parts: dict = field(default_factory=dict)  # host bytes by class

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def gpu_side(ex):
    """The execution as the GPU sees it when the optimizer runs on the CPU: the trace without the optimizer
    state's storages and without what the optimizer step allocates, its peak recomputed (a shallow copy;
    `ex` is left as it is)."""
    tr = ex.tracker.trace
    drop = set(ex.state_serials) | {s for s, st in tr.storages.items() if st.phase == "optimizer"}
    events = [ev for ev in tr.events if ev.serial not in drop]
    live = peak = train_peak = 0
    peak_index, peak_phase = -1, "setup"
    for i, ev in enumerate(events):
        live += ev.nbytes
        if live > peak:
            peak, peak_index, peak_phase = live, i, ev.phase
        if not ev.phase.startswith("eval"):
            train_peak = max(train_peak, live)
    trace = replace(tr, events=events, peak_bytes=peak, peak_index=peak_index, peak_phase=peak_phase)
    out = copy.copy(ex)
    out.tracker = types.SimpleNamespace(trace=trace)
    out.state_serials = set()
    out.train_peak_bytes = train_peak
    return out


def state_bytes(ex) -> int:
    """The optimizer state the trace created (every moment of every trainable tensor, after its first step)."""
    tr = ex.tracker.trace
    return sum(tr.storages[s].nbytes for s in ex.state_serials if s in tr.storages)


def plan_offload(mode: str, per_gpu: dict, *, strategy: str, n: int, gpus_per_node: int, trainable_numel: int, param_bytes: int,
                 state_bytes: int, grad_accum: int, precision: str, host_link_gbs: float) -> tuple[dict, OffloadPlan]:
    """(the per-GPU breakdown with the offloaded classes moved off the GPU, the offload plan).

    `per_gpu`: the breakdown after sharding (plan/distributed.shard) of the trace without the optimizer
    (gpu_side); `param_bytes`: every parameter as stored; `state_bytes`: the optimizer state of the whole model
    (the traced one)."""
    out = dict(per_gpu)
    grads_fp32 = 4 * trainable_numel
    if mode == "fsdp":
        moved = [k for k in ("weights", "trainable_parameters", "optimizer_state") if k in out]
        if grad_accum == 1:  # accumulated gradients stay whole on the GPU until the last micro-batch reduces them
            moved.append("gradients")
        saved = sum(out.get(k, 0) for k in moved)
        for k in moved:
            out[k] = 0
        parts = {"parameter_shards": param_bytes // n, "gradient_shards": grads_fp32 // n,
                 "optimizer_state": state_bytes // n}
        h2d = 2 * grad_accum * (param_bytes // n)  # each unit's shard up for its forward and again for its backward
        d2h = grads_fp32 // n  # reduced (fp32) gradient shards, once per step
    else:
        saved = out.get("optimizer_state", 0) + out.get("gradients", 0)
        out["optimizer_state"] = out["gradients"] = 0
        elem = 4 if precision == "fp32" else 2
        if elem == 2 and out.get("trainable_parameters"):  # the engine holds the trainable weights in 16-bit
            half = out["trainable_parameters"] // 2
            saved += half
            out["trainable_parameters"] -= half
        parts = {"fp32_master": grads_fp32 // n, "gradient_partition": grads_fp32 // n, "optimizer_state": state_bytes // n}
        if strategy == "zero2":  # ZeRO-2 keeps a 16-bit copy of the partition on the host to copy the update back
            parts["bit16_copy"] = elem * trainable_numel // n
        d2h = grad_accum * elem * trainable_numel // n  # reduced gradient partition, every micro-batch
        h2d = elem * trainable_numel // n  # updated weights, once per step (then all-gathered on the GPUs)
    host = sum(parts.values())
    pcie = (h2d + d2h) / (host_link_gbs * 1e9) if host_link_gbs else 0.0  # a CPU run: nothing crosses PCIe
    rate = HOST_ADAM_GBS if mode == "zero-cpuadam" else HOST_ADAM_GBS / TORCH_CPU_ADAM_SLOWDOWN
    cpu_s = ADAM_BYTES_PER_ELEM * (trainable_numel // n) / (rate * 1e9)
    return out, OffloadPlan(mode, int(saved), int(host), int(host * gpus_per_node), int(h2d), int(d2h), host_link_gbs,
                            pcie, cpu_s, host_adam_gbs=rate, parts=parts)


def describe(p: OffloadPlan) -> str:
    """One decision line for the plan's output."""
    gib = 2 ** 30
    return (f"offload: {p.gpu_saved_bytes / gib:.2f} GiB per GPU moved to pinned host memory "
            f"({p.host_bytes_per_rank / gib:.2f} GiB per rank, {p.host_bytes_per_node / gib:.2f} GiB per node); "
            f"PCIe {(p.h2d_bytes + p.d2h_bytes) / gib:.2f} GiB per step at {p.host_link_gbs:g} GB/s = {p.pcie_s:.3f} s "
            f"(not hidden, an upper bound), CPU optimizer step {p.cpu_optimizer_s:.3f} s at an assumed "
            f"{p.host_adam_gbs:g} GB/s ({'DeepSpeedCPUAdam' if p.mode == 'zero-cpuadam' else 'torch on the CPU'}; "
            "plan/offload.py)")
