"""Supervised fine-tuning: the sum of answer-token cross entropies, averaged over the step's answer tokens."""

from __future__ import annotations

from ..loss import count_answer_tokens, grouped_loss_sums, loss_sum_and_output


class SFT:
    name = "sft"
    unit = "answer tokens"
    reference_model = None

    def count(self, mb) -> int:
        return count_answer_tokens(mb["labels"])

    def loss_sum(self, model, mb, *, impl: str = "full", groups: int = 0, **forward_kwargs):
        """(sum of the micro-batch's losses in fp32, the model's output, detached sums to log). `groups` (a run
        mixing modalities, train/step.py): the sums per group too, as `loss_groups` (mmtune.loss.grouped_loss_sums)."""
        if groups:
            total, _, output, sums = grouped_loss_sums(model, mb, groups, impl=impl, **forward_kwargs)
            return total, output, {"loss_groups": sums}
        total, _, output = loss_sum_and_output(model, mb, impl=impl, **forward_kwargs)
        return total, output, {}

    def parts(self, sums: dict, n: int) -> dict:
        return {}

    def empty_step(self) -> str:
        return "this step has no answer tokens (every label is masked); check the data's answers"
