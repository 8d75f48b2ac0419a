"""Plan stand-in of bitsandbytes' AdamW8bit: the same optimizer state, allocated the same way.

bnb's 8-bit optimizer runs a fused CUDA kernel (nothing to trace on CPU fake tensors) whose memory is
its state, created lazily at the first step: for a parameter of >= 4096 elements (`min_8bit_size`),
two uint8 moments of numel bytes each plus one fp32 absmax per 256-element block for each moment and
the two 256-entry fp32 quantization maps; smaller parameters keep two fp32 moments. The update itself
is in place. This class allocates exactly that state and updates in place, so the plan counts what
bnb keeps. `bits=32` is bnb's 32-bit AdamW (two fp32 moments for every parameter).

Paged variants (`paged_adamw_8bit`, `paged_adamw`) allocate the same state with cudaMallocManaged
(bnb's `get_paged`): outside PyTorch's caching allocator, so it is in neither max_memory_allocated nor
max_memory_reserved, and the driver pages it to host memory when the GPU runs short. The plan makes it
on `meta` outside the fake mode (never seen by the tracker) and reports its size (`paged_bytes`); the
planner adds it to the process total (resident while there is room) and says so.
"""

from __future__ import annotations

import math

import torch

from ..compat.torch_internals import no_dispatch

MIN_8BIT_SIZE = 4096
BLOCK = 256


class PlannedAdamW8bit(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, *, bits: int = 8, paged: bool = False):
        super().__init__(params, {"lr": lr})
        self.bits, self.paged, self.paged_bytes = bits, paged, 0

    def _zeros(self, p, shape, dtype):
        if not self.paged:
            # Made from the parameter (a fake tensor in a plan), so the state is fake too, on its device. A bare
            # torch.zeros of an integer dtype is a "value" to the plan's fake mode (ids, masks): it ran for real on
            # the CPU, filling every uint8 moment of every adapter (~0.3 GB per 7B LoRA r128 candidate, 60 % of
            # a --search's CPU); the bytes the tracker counts are the same.
            return p.new_zeros(shape, dtype=dtype)
        with no_dispatch():  # unified memory: not PyTorch's allocator, not the tracker
            t = torch.zeros(shape, dtype=dtype, device="meta")
        self.paged_bytes += t.numel() * t.element_size()
        return t

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = torch.zeros((), dtype=torch.float32)
                    if self.bits == 8 and p.numel() >= MIN_8BIT_SIZE:
                        blocks = math.ceil(p.numel() / BLOCK)
                        for i in ("1", "2"):
                            st["state" + i] = self._zeros(p, p.shape, torch.uint8)
                            st["absmax" + i] = self._zeros(p, (blocks,), torch.float32)
                            st["qmap" + i] = self._zeros(p, (256,), torch.float32)
                    else:
                        st["state1"] = self._zeros(p, p.shape, torch.float32)
                        st["state2"] = self._zeros(p, p.shape, torch.float32)
                st["step"] += 1
                p.add_(p.grad, alpha=-group["lr"])  # in place, as bnb's fused kernel
        return None
