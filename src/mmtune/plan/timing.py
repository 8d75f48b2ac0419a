"""Step time from the traced ops: a roofline per op on the target GPU.

Each traced op costs max(FLOPs / (peak x matmul efficiency), bytes touched / (bandwidth x bandwidth
efficiency)). FLOPs come from torch's flop registry (matmuls, convolutions, attention), counted on the
ops the step really runs (recomputation under checkpointing included, LoRA's small matmuls, the fp32
loss). Bytes are every tensor an op reads and writes. The efficiencies are the fractions of spec peak
that well-tuned training kernels reach in practice; they are assumptions, stated here, not fitted.
A per-op launch overhead covers the many tiny ops of small models.
"""

from __future__ import annotations

from dataclasses import dataclass

MATMUL_EFFICIENCY = 0.6
BANDWIDTH_EFFICIENCY = 0.7
LAUNCH_S = 4e-6


@dataclass
class StepTime:
    step_time_s: float
    tokens_per_s: float
    forward_backward_s: float  # one micro-batch
    optimizer_s: float
    flops_per_step: float


def _op_time(flops: int, nbytes: int, tflops: float, bandwidth_gbs: float) -> float:
    return max(flops / (tflops * 1e12 * MATMUL_EFFICIENCY), nbytes / (bandwidth_gbs * 1e9 * BANDWIDTH_EFFICIENCY)) + LAUNCH_S


def step_time(costs, *, steps: int, traced_micro_batches: int, grad_accum: int, tokens_per_step: int,
              tflops: float, bandwidth_gbs: float, world: int = 1) -> StepTime:
    mb_t = opt_t = 0.0
    mb_f = opt_f = 0
    for flops, nbytes, phase in costs:
        t = _op_time(flops, nbytes, tflops, bandwidth_gbs)
        if phase == "optimizer":
            opt_t += t
            opt_f += flops
        elif phase in ("forward", "loss", "backward"):
            mb_t += t
            mb_f += flops
    n_mb = max(1, steps * traced_micro_batches)
    per_mb = mb_t / n_mb
    per_opt = opt_t / max(1, steps)
    total = per_mb * grad_accum + per_opt
    flops = mb_f / n_mb * grad_accum + opt_f / max(1, steps)
    return StepTime(total, tokens_per_step * world / total if total else 0.0, per_mb, per_opt, flops)
