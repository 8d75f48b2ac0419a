"""Optimizer construction from parameter groups (selected by identity, with per-group LR)."""

from __future__ import annotations

# train.optimizer values stepped by bitsandbytes (its kernels, its state layout): what resolve refuses beside
# sharded parameters or CPU-offloaded state, and what needs the package installed.
BITSANDBYTES = ("adamw_8bit", "paged_adamw_8bit", "paged_adamw")


def make_optimizer(param_groups: list[dict], train_cfg, *, cpu_adam: bool = False):
    """`param_groups` as apply_adapters returns them: torch groups with `params`, `lr`, `weight_decay`
    and `component` (per-component LR multipliers and no decay on 1-D tensors already applied).
    `cpu_adam`: DeepSpeed's C++ AdamW for ZeRO-Offload (the resolved run's train.offload decision), the same
    update as torch's AdamW, stepped on the CPU copies DeepSpeed hands it."""
    import torch

    groups = []
    for g in param_groups:
        params = [p for p in g["params"] if p.requires_grad]
        if params:
            groups.append({**g, "params": params})
    if not groups:
        from .errors import ConfigError

        raise ConfigError("no trainable parameters", where="adapter",
                          fix="check adapter.method / adapter.target_modules / adapter.train_components")
    if train_cfg.optimizer == "adamw" and cpu_adam:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        return DeepSpeedCPUAdam(groups, lr=train_cfg.lr, betas=(0.9, 0.999), eps=1e-8, adamw_mode=True)
    if train_cfg.optimizer == "adamw":
        # foreach: one op per group for all its tensors, as torch already does on CUDA; on the CPU torch's default
        # is a Python loop over the tensors (~10 ops each), bit-identical (tests/test_optim.py) and ~1.5x the
        # CPU time for a LoRA's many small tensors.
        return torch.optim.AdamW(groups, lr=train_cfg.lr, betas=(0.9, 0.999), eps=1e-8, foreach=True)
    if train_cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=train_cfg.lr, momentum=0.9)
    try:
        import bitsandbytes as bnb
    except ImportError:
        from .errors import ConfigError

        raise ConfigError(f"train.optimizer={train_cfg.optimizer} needs bitsandbytes", where="train.optimizer",
                          fix="pip install 'mmtune[qlora]' (bitsandbytes) or train.optimizer=adamw") from None
    kind = {"adamw_8bit": bnb.optim.AdamW8bit, "paged_adamw_8bit": bnb.optim.PagedAdamW8bit,
            "paged_adamw": bnb.optim.PagedAdamW}[train_cfg.optimizer]
    return kind(groups, lr=train_cfg.lr, betas=(0.9, 0.999), eps=1e-8)
