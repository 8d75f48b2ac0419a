"""Direct preference optimisation (Rafailov et al. 2023), with cDPO's label smoothing and IPO as a variant.

A micro-batch holds 2N rows, [chosen 1..N, rejected 1..N] (data/preference.py's PairCollator), labels on
each side's answer only, and every media tensor once: the one forward gets each media tensor twice, once
per side, in row order (the vision tower sees the pixels twice, as in TRL's concatenated forward; decoding
and the processor ran once). Per row: the sum of the answer tokens' log-probabilities. Then, per pair,
with d = (chosen - ref_chosen) - (rejected - ref_rejected):

    sigmoid:  -(1 - eps) * log sigmoid(beta * d) - eps * log sigmoid(-beta * d)
    ipo:      (d_c / n_c - d_r / n_r - 1 / (2 * beta))^2   (per-token means of the log-ratios, as TRL)

The step sums it over the pairs and divides by the step's pairs (all ranks), so the loss is the mean over
the step's pairs whatever the accumulation: TRL's DPOTrainer on the same batch gives the same number
(tests/train/test_dpo_trl.py). The reference log-probs come from a forward under no_grad: the same model
with peft's adapters disabled (LoRA / QLoRA), or a frozen copy (full fine-tuning).

Logged (TRL's names): rewards/chosen, rewards/rejected (beta x log-ratio, means over pairs), rewards/margins,
rewards/accuracies (share of pairs whose chosen reward is the higher), logps/chosen, logps/rejected.
"""

from __future__ import annotations

from contextlib import contextmanager

from ..data.preference import PAIR_MEDIA
from ..loss import IGNORE_INDEX, extract_logits, model_inputs

STATS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen",
         "logps/rejected")


def pair_inputs(mb: dict) -> dict:
    """The model's inputs for the 2N rows: per-row tensors as they are, each media tensor given twice (the
    chosen rows' media, then the rejected rows' in the same order)."""
    import torch

    rows, length = mb["input_ids"].shape[0], mb["input_ids"].shape[-1]
    media = set(mb.get(PAIR_MEDIA, ()))
    out = {}
    for k, v in model_inputs(mb).items():
        if k == PAIR_MEDIA:
            continue
        if k in media:
            v = torch.cat([v, v], dim=0)
        elif isinstance(v, torch.Tensor) and not (v.dim() >= 2 and v.shape[0] == rows and v.shape[-1] == length):
            raise ValueError(f"a pair batch's {k!r} is neither per row nor listed as media")
        out[k] = v
    return out


def sequence_logps(model, inputs: dict, labels):
    """Per row: the sum of log p(label) over the answer tokens (labels shifted by one, -100 ignored), in fp32."""
    import torch.nn.functional as F

    output = model(**inputs, use_cache=False)
    logits = extract_logits(output)
    del output
    shift = logits[:, :-1, :].float()
    target = labels[:, 1:].to(shift.device)
    nll = F.cross_entropy(shift.reshape(-1, shift.size(-1)), target.reshape(-1), ignore_index=IGNORE_INDEX,
                          reduction="none")
    return -nll.view(target.shape).sum(dim=1)


class AdaptersOff:
    """The reference is the base model: the trained model with peft's adapters disabled (no second copy)."""

    kind = "adapters disabled"
    model = None

    @contextmanager
    def active(self, model):
        inner = getattr(model, "module", model)  # DDP / DeepSpeed wrap the peft model
        if not hasattr(inner, "disable_adapter"):
            raise TypeError(f"the DPO reference needs peft's disable_adapter(); {type(inner).__name__} has none "
                            "(adapter.method=full takes a frozen copy instead)")
        with inner.disable_adapter():
            yield inner


class FrozenCopy:
    """The reference is a frozen copy of the starting weights (full fine-tuning)."""

    kind = "frozen copy"

    def __init__(self, model):
        self.model = model

    @contextmanager
    def active(self, model):
        yield self.model


class DPO:
    name = "dpo"
    unit = "pairs"

    def __init__(self, cfg, reference):
        self.beta, self.loss, self.eps = float(cfg.beta), cfg.loss, float(cfg.label_smoothing)
        self.reference = reference

    @property
    def reference_model(self):
        """A model the plan must hold besides the trained one (the frozen copy), or None."""
        return self.reference.model

    def count(self, mb) -> int:
        return int(mb["input_ids"].shape[0]) // 2

    def empty_step(self) -> str:
        return "this step has no preference pair"

    def loss_sum(self, model, mb, *, impl: str = "full", **forward_kwargs):
        """(sum over the micro-batch's pairs of the per-pair loss, None, detached sums of STATS)."""
        import torch
        import torch.nn.functional as F

        if forward_kwargs:
            raise ValueError("train.objective=dpo takes no auxiliary-loss inputs")
        labels = mb["labels"]
        inputs = pair_inputs(mb)
        logps = sequence_logps(model, inputs, labels)
        with torch.no_grad(), self.reference.active(model) as ref:
            ref_logps = sequence_logps(ref, inputs, labels)
        chosen, rejected = logps.chunk(2)
        ref_chosen, ref_rejected = ref_logps.detach().chunk(2)
        lr_c, lr_r = chosen - ref_chosen, rejected - ref_rejected  # log-ratios to the reference
        if self.loss == "sigmoid":
            d = self.beta * (lr_c - lr_r)
            per_pair = -(1 - self.eps) * F.logsigmoid(d) - self.eps * F.logsigmoid(-d)
        else:  # ipo: per-token means, as TRL normalises it
            n = (labels[:, 1:] != IGNORE_INDEX).sum(dim=1).clamp(min=1).to(lr_c.dtype)
            n_c, n_r = n.chunk(2)
            per_pair = (lr_c / n_c - lr_r / n_r - 1 / (2 * self.beta)) ** 2
        r_c, r_r = self.beta * lr_c.detach(), self.beta * lr_r.detach()
        stats = {"rewards/chosen": r_c.sum(), "rewards/rejected": r_r.sum(), "rewards/margins": (r_c - r_r).sum(),
                 "rewards/accuracies": (r_c > r_r).sum(), "logps/chosen": chosen.detach().sum(),
                 "logps/rejected": rejected.detach().sum()}
        return per_pair.sum(), None, {k: v.double() for k, v in stats.items()}

    def parts(self, sums: dict, n: int) -> dict:
        return {k: sums[k] / n for k in STATS if k in sums}
