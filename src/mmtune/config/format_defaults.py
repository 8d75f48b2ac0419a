"""Defaults a data format or a training objective brings for keys the config leaves unset.

- A transcription set (data.format=asr) is scored with word and character error rates, over transcripts longer
  than the 16 new tokens a short answer needs.
- Raw text (data.format=text) is evaluated by its loss: there is no answer to generate or score.
- Preference and RL objectives (train.objective=dpo / grpo) train with LoRA dropout off, as TRL's DPOTrainer does
  (`disable_dropout=True`): their loss compares the policy's log-probabilities with the reference's (adapters off,
  so no LoRA dropout there) and, for grpo, with the samples drawn in eval mode. Dropout in the policy's forward
  puts noise into exactly those differences (rewards/margins, the KL term) that is not in the model being
  trained, and the logged rewards are not the model's. The model's own dropout (attention_dropout in its config)
  is left as the checkpoint sets it: every shipped family has it at 0.

Filled into the config tree before validation, with the format or objective named as where each value came from
(the start-up summary and config.resolved.yaml say so, as for a profile's values). A value the config sets is
kept."""

from __future__ import annotations

FORMAT_DEFAULTS = {"asr": {"eval.metrics": ["wer", "cer"], "eval.max_new_tokens": 128},
                   # raw text has no answer to generate: evaluation is the eval loss (and its perplexity)
                   "text": {"eval.generate": False, "eval.metrics": []}}
OBJECTIVE_DEFAULTS = {"dpo": {"adapter.dropout": 0.0}, "grpo": {"adapter.dropout": 0.0}}


def with_format_defaults(tree: dict, sources: dict | None) -> dict:
    """`tree` with its single data format's defaults and its objective's for the keys it does not set (a
    mixture's sources keep their per-source metrics: data/mixture.py FORMAT_METRICS)."""
    data = tree.get("data") if isinstance(tree.get("data"), dict) else {}
    train = tree.get("train") if isinstance(tree.get("train"), dict) else {}
    fmt = data.get("format")  # before validation: a list or mapping given here is the schema's error, not a lookup's
    defaults = FORMAT_DEFAULTS.get(fmt) if isinstance(fmt, str) and not isinstance(data.get("train"), list) else None
    _fill(tree, defaults, sources, f"data.format={fmt}'s default")
    objective = train.get("objective")
    if isinstance(objective, str):
        _fill(tree, OBJECTIVE_DEFAULTS.get(objective), sources,
              f"train.objective={objective}'s default (dropout off: the loss compares log-probabilities with the "
              "reference's)")
    return tree


def _fill(tree: dict, defaults: dict | None, sources: dict | None, why: str) -> None:
    for key, value in (defaults or {}).items():
        section, name = key.split(".")
        part = tree.setdefault(section, {})
        if isinstance(part, dict) and part.get(name) is None:
            part[name] = value
            if sources is not None:
                sources[key] = why
