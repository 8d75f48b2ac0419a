"""A frozen component runs as it does at inference: no dropout, BatchNorm running statistics left alone.

`requires_grad=False` stops the updates but not the module's training mode: every `model.train()` (the loop's
start, the return from evaluation or a GRPO rollout) puts a frozen vision tower back into train mode, so its
dropout stays on and a BatchNorm overwrites the pretrained running statistics with the fine-tuning batches',
which a LoRA adapter does not even save (the reports in docs/doctor.md, batch 19). Here the frozen part's
modules keep eval mode through any later `train()` call; trained components and LoRA-hosting ones are left as
they are, and so is a frozen component the gradient passes through on its way to a trained one (the decoder of a
projector-only stage): transformers checkpoints a layer only in train mode. Decided once, when the model is
built, after staged unfreezing has made every stage's weights trainable (a component a later stage trains counts
as trained).
"""

from __future__ import annotations

import types

# Components in forward order: the media encoders feed the projector, which feeds the decoder, then the head.
FORWARD_ORDER = {"vision": 0, "audio": 0, "projector": 1, "decoder": 2, "lm_head": 3}


def _eval_only(self, mode: bool = True):
    from torch import nn

    return nn.Module.train(self, False)


def _mode_matters(module) -> list[str]:
    """What train mode would change in `module`'s subtree: active dropout, BatchNorm statistics."""
    from torch import nn

    found = set()
    for m in module.modules():
        if getattr(m, "track_running_stats", False) and getattr(m, "running_mean", None) is not None:  # BatchNorm
            found.add("BatchNorm statistics")
        elif isinstance(m, nn.Dropout) and m.p > 0:
            found.add(f"dropout {m.p:g}")
        else:  # transformers' attention passes `dropout=0.0 if not self.training else self.attention_dropout`
            for attr in ("attention_dropout", "dropout"):
                v = getattr(m, attr, None)
                if isinstance(v, float) and v > 0:
                    found.add(f"dropout {v:g}")
    return sorted(found)


def keep_frozen_in_eval(model, family) -> list[str]:
    """Pin eval mode on the modules of every component with no trainable weight (hosting no trained LoRA);
    returns the decision's lines (only where train mode would have changed something)."""
    from .adapters import base_name, host_component_of

    trained = {host_component_of(family, n) for n, p in model.named_parameters() if p.requires_grad}
    # Only what lies before every trained component: no gradient flows through it. A frozen component the
    # gradient crosses (LLaVA stage 1's decoder, in front of nothing but behind the trained projector) keeps
    # train mode, which transformers' gradient checkpointing needs (it recomputes only `if self.training`).
    first = min((FORWARD_ORDER[c] for c in trained if c in FORWARD_ORDER), default=None)
    frozen = {c for c, i in FORWARD_ORDER.items()
              if c not in trained and family.components.get(c) and first is not None and i < first}
    if not frozen:
        return []
    pinned: dict[str, list] = {}
    done: list[str] = []
    for name, mod in model.named_modules():
        if not name or any(name.startswith(d + ".") for d in done):
            continue
        comp = family.component_of(base_name(name) + ".")
        if comp not in frozen:
            continue
        params = list(mod.parameters())
        if not params or any(p.requires_grad for p in params):
            continue
        # every weight below is a frozen component's (Qwen2-VL's blocks, not `visual` around a trained merger)
        if any(family.component_of(base_name(f"{name}.{n}")) not in frozen for n, _ in mod.named_parameters()):
            continue
        mod.train = types.MethodType(_eval_only, mod)
        mod.train()
        done.append(name)
        pinned.setdefault(comp, []).append(mod)
    lines = []
    for comp in sorted(pinned):
        what = sorted({w for m in pinned[comp] for w in _mode_matters(m)})
        if what:
            lines.append(f"frozen {comp}: kept in eval mode during training ({', '.join(what)} as at inference; "
                         "the weights are frozen, so train mode would only add noise or overwrite statistics)")
    return lines
