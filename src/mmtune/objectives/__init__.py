"""What a training step minimises: one small module per objective behind one interface.

The loop, checkpoints, resume, stages, mixtures, metrics and the planner's trace are single; an objective
only says
- what a micro-batch holds: its training encoder and collator (`data/preference.py` for dpo),
- how many units the step's loss is averaged over (`count`: answer tokens for sft, pairs for dpo),
- how a micro-batch's loss *sum* is computed (`loss_sum`, with detached sums of what it logs),
- what is logged (`parts`: those sums over the step's units),
- and what else the plan must hold (`reference_model`: dpo's frozen copy under full fine-tuning).
`train/step.py` calls these for every objective; `plan` traces that same step on fake tensors.

train.objective is decided once in the resolved run (`decide`), with the reference model and the loss.
"""

from __future__ import annotations

from ..config.schema import LORA_METHODS
from .sft import SFT

NAMES = ("sft", "dpo", "grpo")


def decide(cfg, strategy: str | None = None) -> tuple[list, list]:
    """(decisions as (key, value, reason), problems) for train.objective: what the run minimises, and any
    combination it cannot run yet. The resolved run records them (resolve/run.py)."""
    def Decision(*a):  # noqa: N802 - read like the resolved run's Decision records
        return a

    t = cfg.train
    if t.objective == "sft":
        return [Decision("train.objective", "sft", "cross entropy over the answer tokens (train.objective=sft)")], []
    problems = []
    if t.objective == "grpo":
        g = t.grpo
        rewards = " + ".join(f"{r.weight:g} x {r.name}" for r in g.rewards)
        out = [Decision("train.objective", f"grpo (G={g.generations}, {g.max_completion_length} new tokens at "
                        f"temperature {g.temperature:g}, clip {g.epsilon:g}, KL beta {g.beta:g}; reward {rewards})",
                        "train.objective=grpo: completions sampled from the model, scored by the rewards, advantages "
                        "normalised per prompt's group, one update per generation")]
        if g.beta > 0:
            out.append(_reference(cfg))
    else:
        d = t.dpo
        loss = (f"sigmoid, beta={d.beta:g}" + (f", label_smoothing={d.label_smoothing:g}" if d.label_smoothing else "")
                if d.loss == "sigmoid" else f"ipo, tau=beta={d.beta:g}")
        out = [Decision("train.objective", f"dpo ({loss})", "train.objective=dpo: preference pairs, chosen and "
                        "rejected in one forward, the loss averaged over the step's pairs"), _reference(cfg)]
    if needs_frozen_copy(cfg):
        strategy = strategy or t.strategy
        if strategy in ("fsdp", "zero3"):
            problems.append(f"train.objective={t.objective} with adapter.method=full under train.strategy={strategy}: "
                            "the frozen reference copy is not sharded yet; use LoRA / QLoRA or ddp / zero2")
    if t.aux_losses:
        problems.append(f"train.aux_losses with train.objective={t.objective}: auxiliary losses are SFT terms; "
                        "remove them")
    if cfg.data.packing:
        problems.append(f"data.packing with train.objective={t.objective}: set data.packing=false")
    if cfg.data.streaming:
        problems.append(f"data.streaming with train.objective={t.objective} is not supported yet; set "
                        "data.streaming=false")
    return out, problems


def _reference(cfg):
    kind = cfg.train.objective
    if cfg.adapter.method in LORA_METHODS:
        return ("reference model", "the base model with the adapters disabled",
                f"train.objective={kind}, adapter.method={cfg.adapter.method}: the same weights with peft's adapters "
                "off, no second copy (one more forward under no_grad per micro-batch)")
    return ("reference model", "a frozen copy of the starting weights, in the compute dtype",
            f"train.objective={kind}, adapter.method=full: the trained weights move, so the reference is a copy "
            "made before step 1 (planned as weights held beside the model)")


def make_objective(cfg, model=None, *, reference_model=None, tokenizer=None, processor=None):
    """The run's objective. dpo / grpo: the reference is `reference_model` when given (the frozen copy of a full
    fine-tune, built by `build`), else `model` with its adapters disabled. grpo decodes with `tokenizer` and never
    samples `processor`'s media placeholder tokens."""
    if cfg.train.objective == "sft":
        return SFT()
    from .dpo import AdaptersOff, FrozenCopy

    ref = FrozenCopy(reference_model) if reference_model is not None else AdaptersOff()
    if cfg.train.objective == "dpo":
        from .dpo import DPO

        return DPO(cfg.train.dpo, ref)
    from ..data.media_tokens import media_token_ids
    from .grpo import GRPO

    # A sampled media placeholder would reach the training forward as an image / video / audio slot with no
    # features behind it (transformers raises "Image features and image tokens do not match"): never sampled.
    media = sorted(set(media_token_ids(processor).values())) if processor is not None else []
    return GRPO(cfg.train.grpo, ref, tokenizer, never_sample=media)


def needs_frozen_copy(cfg) -> bool:
    """A reference model is needed and the adapters cannot give it (full fine-tuning)."""
    t = cfg.train
    wants = t.objective == "dpo" or (t.objective == "grpo" and t.grpo.beta > 0)
    return wants and cfg.adapter.method not in LORA_METHODS


__all__ = ["NAMES", "SFT", "decide", "make_objective", "needs_frozen_copy"]
