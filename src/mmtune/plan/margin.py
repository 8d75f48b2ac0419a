"""The margin rule: when a planned run "fits", stated once for `plan`, `plan --search`, `doctor` (MM001,
MM003) and `train`'s refusal.

A run fits when its planned process total (peak reserved + CUDA context + cuBLAS workspaces + NCCL
buffers, what nvidia-smi shows) plus a headroom is at most what the driver reports usable on the GPU:

    headroom = max(margin % of the planned process total, 0.5 GiB)      (margin: --margin, default 5)

Why this shape. What the plan already counts (allocator rounding, reserved but unused, the context) needs
no margin. What it does not: its own error, which grows with what is planned (benchmarks/
planner_accuracy.py: tensor peaks within 2 % of measured CPU steps), and a few fixed costs outside the
model (a display server on a workstation card, attention kernels' internal workspaces, another process's
context), a few hundred MiB whatever the GPU. A share of the *GPU's* memory (the old rule: 10 % of it)
asks 8 GiB of headroom on an 80 GB card and refused seed 001 on its own 24 GB card at 2.36 GiB free.
At the boundary the verdict is decided on whole bytes, and printed with both figures in GiB, so a run
refused is always shown short of the headroom it needed (never "10.0 % free, asked 10 %").
"""

from __future__ import annotations

GiB = 2**30
MARGIN_PCT = 5.0  # default --margin: headroom in % of the planned process total
MARGIN_FLOOR_BYTES = GiB // 2  # the headroom never below this (costs outside the model, not proportional)


def required_headroom(process_total_bytes: int, margin_pct: float = MARGIN_PCT) -> int:
    """The free bytes a plan of `process_total_bytes` must leave on the GPU."""
    return max(int(process_total_bytes * margin_pct / 100), MARGIN_FLOOR_BYTES)


def fits(process_total_bytes: int, gpu_bytes: int, margin_pct: float = MARGIN_PCT) -> bool:
    return process_total_bytes + required_headroom(process_total_bytes, margin_pct) <= gpu_bytes


def describe(margin_pct: float = MARGIN_PCT) -> str:
    return f"max({margin_pct:g} % of the planned total, {MARGIN_FLOOR_BYTES / GiB:g} GiB)"


def verdict_line(r) -> str:
    """One line, plain text: fits or not, the free memory against the headroom asked, in GiB."""
    free, need = r.margin_bytes, r.required_margin_bytes
    head = "fits" if r.fits else "does NOT fit"
    short = "" if r.fits else (f", {(need - free) / GiB:.2f} GiB short" if free >= 0 else
                               f", {-free / GiB:.2f} GiB over the GPU's memory")
    return (f"{head} {r.gpu_name}: {r.process_total_bytes / GiB:.2f} GiB planned of {r.gpu_total_bytes / GiB:.2f} "
            f"GiB, {max(free, 0) / GiB:.2f} GiB free, headroom asked {need / GiB:.2f} GiB = "
            f"{describe(r.required_margin_pct)}{short}")
