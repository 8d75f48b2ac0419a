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
        "`logits` (ModelOutput/dict) or a tuple whose first 3-D tensor is (batch, seq, vocab); a model that "
        "returns only its own loss: model.loss=output (docs/byo_model.md)"
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
    """What the model's forward takes: the batch without labels and auxiliary-loss inputs (`aux_*`)."""
    return {k: v for k, v in batch.items() if k != "labels" and not k.startswith("aux_")}


def extract_loss(output):
    """The model's own loss from any output form: ModelOutput / object (`loss`), dict (`loss`), or a tuple
    whose first element is a 0-dim tensor (transformers' return_dict=False order)."""
    import torch

    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if loss is None and isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor) \
            and output[0].dim() == 0:
        loss = output[0]
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        from .errors import ModelLoadError

        raise ModelLoadError(
            f"model.loss=output, but the model's output ({type(output).__name__}) holds no loss", where="model.loss",
            fix="return a scalar `loss` (attribute, dict key, or first element of a tuple) when forward gets `labels`, "
                "or model.loss=logits (mmtune's cross entropy from the logits) (docs/byo_model.md)")
    return loss


def own_loss(model) -> bool:
    """Whether the model computes its own loss (model.loss=output, set on a brought model by the builder);
    seen through DDP (`.module`) and peft (attribute fallback to the base model)."""
    return getattr(getattr(model, "module", model), "mmtune_loss", "logits") == "output"


def loss_sum_and_output(model, batch: dict, **forward_kwargs):
    """`loss_sum` plus the model's output, for auxiliary losses that read it (hidden states)."""
    import torch.nn.functional as F

    labels = batch["labels"]
    if own_loss(model):
        # The model's loss is a mean over its answer tokens (labels shifted by one, -100 ignored, as
        # transformers computes it); times those tokens it is the sum the step normalises.
        output = model(**model_inputs(batch), labels=labels, use_cache=False, **forward_kwargs)
        n = (labels[:, 1:] != IGNORE_INDEX).sum()
        return extract_loss(output).float() * n, n, output
    output = model(**model_inputs(batch), use_cache=False, **forward_kwargs)
    logits = extract_logits(output)
    shift_logits = logits[:, :-1, :].float()
    shift_labels = labels[:, 1:].to(shift_logits.device)
    total = F.cross_entropy(shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1),
                            ignore_index=IGNORE_INDEX, reduction="sum")
    return total, (shift_labels != IGNORE_INDEX).sum(), output


def to_device(batch: dict, device) -> dict:
    return {k: (v.to(device, non_blocking=True) if hasattr(v, "to") else v) for k, v in batch.items()}
