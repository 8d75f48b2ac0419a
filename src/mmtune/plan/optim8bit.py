"""Plan stand-in of bitsandbytes' AdamW8bit: the same optimizer state, allocated the same way.

bnb's 8-bit optimizer runs a fused CUDA kernel (nothing to trace on CPU fake tensors) whose memory is
its state, created lazily at the first step: for a parameter of >= 4096 elements (`min_8bit_size`),
two uint8 moments of numel bytes each plus one fp32 absmax per 256-element block for each moment and
the two 256-entry fp32 quantization maps; smaller parameters keep two fp32 moments. The update itself
is in place. This class allocates exactly that state and updates in place, so the plan counts what
bnb keeps. (Paged variants are not planned: their state lives partly outside PyTorch's allocator.)
"""

from __future__ import annotations

import math

import torch

MIN_8BIT_SIZE = 4096
BLOCK = 256


class PlannedAdamW8bit(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = torch.zeros((), dtype=torch.float32)
                    if p.numel() >= MIN_8BIT_SIZE:
                        blocks = math.ceil(p.numel() / BLOCK)
                        st["state1"] = torch.zeros_like(p, dtype=torch.uint8)
                        st["state2"] = torch.zeros_like(p, dtype=torch.uint8)
                        st["absmax1"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                        st["absmax2"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                        st["qmap1"] = torch.zeros(256, dtype=torch.float32, device=p.device)
                        st["qmap2"] = torch.zeros(256, dtype=torch.float32, device=p.device)
                    else:
                        st["state1"] = torch.zeros_like(p, dtype=torch.float32)
                        st["state2"] = torch.zeros_like(p, dtype=torch.float32)
                st["step"] += 1
                p.add_(p.grad, alpha=-group["lr"])  # in place, as bnb's fused kernel
        return None
