"""The optimizer mmtune builds: torch's AdamW with foreach=True, the same update as torch's default per-tensor
loop on the CPU (bit for bit), in one op per group for all its tensors."""

from __future__ import annotations

import torch

from mmtune.config.schema import RunConfig
from mmtune.optim import make_optimizer


def _params(seed: int):
    g = torch.Generator().manual_seed(seed)
    # a LoRA's shapes: many small matrices, and a 1-D tensor in a group without weight decay
    return [torch.nn.Parameter(torch.randn(s, generator=g)) for s in [(8, 32), (32, 8)] * 6 + [(32,)]]


def test_adamw_is_foreach_and_bit_identical_to_the_per_tensor_loop():
    cfg = RunConfig.model_validate({"model": {"name": "tiny/qwen2"}, "train": {"lr": 1e-3}}).train
    ours_p, ref_p = _params(0), _params(0)
    ours = make_optimizer([{"params": ours_p[:-1], "lr": 1e-3, "weight_decay": 0.01},
                           {"params": ours_p[-1:], "lr": 2e-3, "weight_decay": 0.0}], cfg)
    ref = torch.optim.AdamW([{"params": ref_p[:-1], "lr": 1e-3, "weight_decay": 0.01},
                             {"params": ref_p[-1:], "lr": 2e-3, "weight_decay": 0.0}], betas=(0.9, 0.999), eps=1e-8,
                            foreach=False)
    assert ours.defaults["foreach"] is True
    g = torch.Generator().manual_seed(1)
    for _ in range(25):
        grads = [torch.randn(p.shape, generator=g) for p in ours_p]
        for p, q, gr in zip(ours_p, ref_p, grads):
            p.grad, q.grad = gr.clone(), gr.clone()
        ours.step()
        ref.step()
    assert all(torch.equal(p, q) for p, q in zip(ours_p, ref_p))
    assert not torch.equal(ours_p[0], _params(0)[0])  # it did update
