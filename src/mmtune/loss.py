"""The loss, one definition: what training minimises, evaluation reports and the planner traces.

Every micro-batch contributes its *sum* of answer-token cross entropies in fp32 (`loss_sum`); the loop
divides by the answer tokens of the whole accumulated step (train/step.py).
"""

from __future__ import annotations

IGNORE_INDEX = -100


def extract_logits(output):
    """Logits from any output form: ModelOutput / dict (`logits`) or tuple (first tensor with vocab dim).

    Custom models return tuples, dicts with extra fields, or dataclasses (failure mode 21); the loop
    never calls `.loss` on them, it computes the loss itself from the logits.
    """
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "logits") and output.logits is not None:
        return output.logits
    if isinstance(output, dict) and output.get("logits") is not None:
        return output["logits"]
    if isinstance(output, (tuple, list)):
        for item in output:
            if isinstance(item, torch.Tensor) and item.dim() == 3:
                return item
    raise TypeError(
        f"cannot find logits in the model output of type {type(output).__name__}; the model must return "
        "`logits` (ModelOutput/dict) or a tuple whose first 3-D tensor is (batch, seq, vocab)"
    )


def count_answer_tokens(labels) -> int:
    """Answer tokens that contribute to the loss (labels shifted by one, as in causal LM training)."""
    return int((labels[:, 1:] != IGNORE_INDEX).sum())


def loss_sum(model, batch: dict):
    """(sum of answer-token cross entropies in fp32, number of answer tokens) for one micro-batch.

    Labels are not passed to the model, so it never computes (and upcasts) a loss of its own.
    """
    total, n, _ = loss_sum_and_output(model, batch)
    return total, n


def model_inputs(batch: dict) -> dict:
    """What the model's forward takes: the batch without labels, auxiliary-loss inputs (`aux_*`) and a packed
    batch's token mask (`packed_*`: a packed batch has no attention_mask, see data/packing.py)."""
    return {k: v for k, v in batch.items() if k != "labels" and not k.startswith(("aux_", "packed_"))}


def loss_sum_and_output(model, batch: dict, **forward_kwargs):
    """`loss_sum` plus the model's output, for auxiliary losses that read it (hidden states)."""
    import torch.nn.functional as F

    labels = batch["labels"]
    output = model(**model_inputs(batch), use_cache=False, **forward_kwargs)
    logits = extract_logits(output)
    shift_logits = logits[:, :-1, :].float()
    shift_labels = labels[:, 1:].to(shift_logits.device)
    total = F.cross_entropy(shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1),
                            ignore_index=IGNORE_INDEX, reduction="sum")
    return total, (shift_labels != IGNORE_INDEX).sum(), output


def to_device(batch: dict, device) -> dict:
    return {k: (v.to(device, non_blocking=True) if hasattr(v, "to") else v) for k, v in batch.items()}
