"""Prompts for objectives that sample their own completions (train.objective=grpo): a record's prompt
encoded with the generation prompt, its references beside it, collated with left padding so every
completion starts at the same column (as batched generation wants)."""

from __future__ import annotations

import json

from .forwarding import Forwarding

REFS = "grpo_refs"  # an encoded prompt's references: UTF-8 JSON bytes (a tensor, so caches and workers keep it)


class PromptEncoder(Forwarding):
    """`encode`: the prompt (the encoder's encode_prompt) plus the references; `measure`: the record's own
    length (prompt + reference answer) plus the completion budget."""

    wrapped = "encoder"

    def __init__(self, encoder, max_completion_length: int):
        self.encoder, self.budget = encoder, int(max_completion_length)

    def encode(self, record, *, check_length: bool = True) -> dict:
        import torch

        item = self.encoder.encode_prompt(record)
        refs = [r for r in [self.encoder.answer_text(record), *record.references] if r and r.strip()]
        item[REFS] = torch.tensor(list(json.dumps(refs).encode("utf-8")), dtype=torch.uint8)
        if check_length:
            self.encoder._check_length(int(item["input_ids"].shape[0]) + self.budget, record)
        return item

    def measure(self, record) -> dict:
        counts = self.encoder.measure(record)
        total = counts["total"] + self.budget
        if total > self.encoder.max_length:
            self.encoder._check_length(total, record)
        return {**counts, "total": total}


class PromptCollator(Forwarding):
    """Prompts left-padded by the run's collator rules; the references as a tuple of JSON strings."""

    wrapped = "collator"

    def __init__(self, collator):
        self.collator = collator

    def __call__(self, items: list[dict]) -> dict:
        refs = tuple(bytes(it[REFS].tolist()).decode("utf-8") for it in items)
        batch = self.collator([{k: v for k, v in it.items() if k != REFS} for it in items])
        batch[REFS] = refs
        return batch


def references(batch) -> list[list[str]]:
    return [json.loads(s) for s in batch[REFS]]
