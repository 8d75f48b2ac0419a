"""Optimizer construction from parameter groups (selected by identity, with per-group LR)."""

from __future__ import annotations


def make_optimizer(param_groups: list[dict], train_cfg):
    """`param_groups`: [{"params": [...], "lr_mult": float, "name": str}], as apply_adapters returns."""
    import torch

    groups = []
    for g in param_groups:
        params = [p for p in g["params"] if p.requires_grad]
        if not params:
            continue
        # No weight decay on biases and norms (1-D tensors), the usual AdamW practice.
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        lr = train_cfg.lr * g.get("lr_mult", 1.0)
        name = g.get("name", "params")
        if decay:
            groups.append({"params": decay, "lr": lr, "weight_decay": train_cfg.weight_decay, "name": name})
        if no_decay:
            groups.append({"params": no_decay, "lr": lr, "weight_decay": 0.0, "name": name + ".no_decay"})
    if not groups:
        from .errors import ConfigError

        raise ConfigError("no trainable parameters", where="adapter",
                          fix="check adapter.method / adapter.target_modules / adapter.train_components")
    if train_cfg.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=train_cfg.lr, betas=(0.9, 0.999), eps=1e-8)
    if train_cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=train_cfg.lr, momentum=0.9)
    try:
        import bitsandbytes as bnb
    except ImportError:
        from .errors import ConfigError

        raise ConfigError("train.optimizer=adamw_8bit needs bitsandbytes", where="train.optimizer",
                          fix="pip install 'mmtune[gpu]' or train.optimizer=adamw") from None
    return bnb.optim.AdamW8bit(groups, lr=train_cfg.lr, betas=(0.9, 0.999), eps=1e-8)
