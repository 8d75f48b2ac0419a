"""The loss, one definition: what training minimises, evaluation reports and the planner traces.

Every micro-batch contributes its *sum* of answer-token cross entropies in fp32 (`loss_sum`); the loop
divides by the answer tokens of the whole accumulated step (train/step.py).

Two ways to compute it (`train.loss_impl`, decided in the resolved run; train and plan both call
`loss_sum_and_output(..., impl=)`):
- `full`: the model's logits (batch x seq x vocab) upcast to fp32, then cross entropy. On a 152k-word
  vocabulary that is 0.6 GB per 1,000 tokens in fp32, plus its gradient in backward.
- `chunked`: the output head is skipped inside the forward (it sees a zero-length slice), and the loss
  is computed from the final hidden states of the answer tokens in chunks, each chunk's head + fp32
  cross entropy under non-reentrant checkpointing: only one chunk's logits exist at a time, in forward
  and in backward (recomputed there). Same loss and gradients up to fp32 summation order.
- `liger`: the same, with Liger-Kernel's fused linear cross entropy (CUDA, Triton) when the head is a
  plain `nn.Linear`; anything else takes the `chunked` path.

A run mixing modalities also sums the loss per record modality (`grouped_loss_sums`, data/modality.py): per
token on the full and chunked paths; a path that gives one scalar (Liger's kernel, a model's own loss) counts
the micro-batch whole for its modality, or under "mixed" when it holds several.
"""

from __future__ import annotations

IGNORE_INDEX = -100
# Which positions of a batch are tokens, not padding, where the model is given no attention_mask (a packed batch,
# data/packing.py; a right-padded one whose mask the run leaves out, data/collate.py): counted, never a model input.
TOKEN_MASK = "token_mask"
# Which loss group (the record's modality, data/modality.py) each position belongs to, in a run whose data mixes
# modalities: the loss is also summed per group (`grouped_loss_sums`). Per token, so a packed row's records keep
# their own; never a model input.
LOSS_GROUP = "loss_group"


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


def loss_sum(model, batch: dict, impl: str = "full"):
    """(sum of answer-token cross entropies in fp32, number of answer tokens) for one micro-batch.

    Labels are not passed to the model, so it never computes (and upcasts) a loss of its own. `impl`: as
    `loss_sum_and_output`; evaluation passes `eval_impl(the run's train.loss_impl)`.
    """
    total, n, _ = loss_sum_and_output(model, batch, impl)
    return total, n


def eval_impl(run_impl: str) -> str:
    """The loss path of evaluation (no gradients): the run's own decision, so a run that chunks its loss to keep
    the full fp32 logits out of memory does not build them at its first eval (eval batch x sequence x vocabulary,
    which the training steps never held). Liger's kernel computes gradients inside its forward (a training
    kernel): evaluation takes its chunked torch twin."""
    return "full" if run_impl == "full" else "chunked"


def model_inputs(batch: dict) -> dict:
    """What the model's forward takes: the batch without labels, auxiliary-loss inputs (`aux_*`) and `token_mask`
    (which positions are tokens where the model gets no attention_mask: a packed batch, data/packing.py, or a
    right-padded one whose mask the run leaves out, data/collate.py) and `loss_group`."""
    return {k: v for k, v in batch.items() if k not in ("labels", TOKEN_MASK, LOSS_GROUP) and not k.startswith("aux_")}


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


def chunk_rows(rows: int, hidden: int, vocab: int) -> int:
    """Tokens per chunk: Liger's rule, so that one chunk's logits are about the size of all the hidden
    states (rows x hidden): next power of two of rows / ceil(vocab / hidden)."""
    import math

    want = max(1, math.ceil(rows / max(1, math.ceil(vocab / max(1, hidden)))))
    return 1 << (want - 1).bit_length()


def loss_sum_and_output(model, batch: dict, impl: str = "full", **forward_kwargs):
    """`loss_sum` plus the model's output, for auxiliary losses that read it (hidden states).

    `impl` (module docstring): "full" (default), "chunked" or "liger". With a chunked loss the output's
    `logits` has zero positions (the head ran on an empty slice)."""
    total, n, output, _ = _loss(model, batch, impl, 0, forward_kwargs)
    return total, n, output


def grouped_loss_sums(model, batch: dict, groups: int, impl: str = "full", **forward_kwargs):
    """`loss_sum_and_output` with the split by `batch[LOSS_GROUP]`: (total, n, output, sums) where `sums` is a
    detached (2, groups + 1) fp32 tensor on the device: row 0 the loss sum of each group, row 1 its answer tokens;
    column `groups` ("mixed") takes a micro-batch whose loss comes as one scalar (Liger's kernel, a model's own
    loss) and whose answer tokens belong to several groups. Exact per token on the full and chunked paths, where
    `total` is the sum of the groups' sums. Computed on the device: nothing is read back here."""
    return _loss(model, batch, impl, groups, forward_kwargs)


def _loss(model, batch: dict, impl: str, groups: int, forward_kwargs: dict):
    import torch.nn.functional as F

    labels = batch["labels"]
    if own_loss(model):  # (a brought model's own loss: no head of ours to chunk, whatever `impl`)
        # The model's loss is a mean over its answer tokens (labels shifted by one, -100 ignored, as
        # transformers computes it); times those tokens it is the sum the step normalises.
        output = model(**model_inputs(batch), labels=labels, use_cache=False, **forward_kwargs)
        n = (labels[:, 1:] != IGNORE_INDEX).sum()
        total = extract_loss(output).float() * n
        return total, n, output, _attributed(batch, total, n, groups) if groups else None
    if impl != "full":
        return _chunked_loss_sum_and_output(model, batch, impl, forward_kwargs, groups)
    output = model(**model_inputs(batch), use_cache=False, **forward_kwargs)
    logits = extract_logits(output).float()
    # Position t predicts label t + 1: the labels are shifted left (the last position gets -100), not the logits,
    # as transformers' own loss does. Slicing the logits made a copy of them (they are not contiguous after the
    # slice), and its gradient another: 2x the cross entropy's CPU time on 1,000-token rows. The same terms;
    # the gradient is bit-identical, the sum can differ in its last bit (the reduction's order).
    shift_labels = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX).to(logits.device)
    flat = shift_labels.reshape(-1)
    if not groups:
        total = F.cross_entropy(logits.reshape(-1, logits.size(-1)), flat, ignore_index=IGNORE_INDEX, reduction="sum")
        return total, (shift_labels != IGNORE_INDEX).sum(), output, None
    # Per token (a masked position's term is exactly 0), summed into its label's group: the total is their sum.
    per_token = F.cross_entropy(logits.reshape(-1, logits.size(-1)), flat, ignore_index=IGNORE_INDEX, reduction="none")
    group = F.pad(batch[LOSS_GROUP][:, 1:], (0, 1)).to(logits.device).reshape(-1).long()
    sums = _group_sums(per_token, flat != IGNORE_INDEX, group, groups)
    return sums[0].sum(), (shift_labels != IGNORE_INDEX).sum(), output, sums.detach()


def _group_sums(values, keep, group, groups: int):
    """(2, groups + 1): the sums of `values` and the counts of `keep` by `group` (index_add: no host sync)."""
    import torch

    out = values.new_zeros((2, groups + 1), dtype=torch.float32)
    return torch.stack([out[0].index_add(0, group, values.float()), out[1].index_add(0, group, keep.float())])


def _attributed(batch: dict, total, n, groups: int):
    """A loss that comes as one scalar: the micro-batch's whole sum and answer tokens go to its group when every
    answer token of it has one group, else to column `groups` ("mixed"). Decided on the device (no sync)."""
    import torch

    labels = batch["labels"][:, 1:]
    keep = labels != IGNORE_INDEX
    group = batch[LOSS_GROUP][:, 1:].to(labels.device).long()
    low = torch.where(keep, group, groups).amin()
    high = torch.where(keep, group, -1).amax()
    col = torch.where(low == high, low, groups).reshape(1).to(total.device)
    out = total.new_zeros((2, groups + 1), dtype=torch.float32)
    return torch.stack([out[0].index_add(0, col, total.detach().float().reshape(1)),
                        out[1].index_add(0, col, n.to(total.device).float().reshape(1))])


def _output_head(model):
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        raise TypeError(f"train.loss_impl=chunked needs the model's output head; {type(model).__name__} has no "
                        "get_output_embeddings() (use train.loss_impl=full)")
    return head


def _chunked_loss_sum_and_output(model, batch: dict, impl: str, forward_kwargs: dict, groups: int = 0):
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    head = _output_head(model)
    captured = {}

    def skip_head(mod, args):
        captured["hidden"] = args[0]
        return (args[0][..., :0, :],)  # the head computes (batch, 0, vocab): no logits in the forward

    handle = head.register_forward_pre_hook(skip_head)
    try:
        output = model(**model_inputs(batch), use_cache=False, **forward_kwargs)
    finally:
        handle.remove()
    hidden = captured["hidden"]
    labels = batch["labels"][:, 1:].to(hidden.device)
    keep = labels != IGNORE_INDEX
    n = keep.sum()
    # Only answer positions: hidden states of position t predict the label at t + 1.
    rows = hidden[:, :-1, :][keep]
    targets = labels[keep]
    if impl == "liger" and rows.is_cuda and type(head) is torch.nn.Linear:
        from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss

        fn = LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE_INDEX, reduction="sum")
        weight = head.weight if head.weight.dtype == rows.dtype else head.weight.to(rows.dtype)
        total = fn(weight, rows, targets, head.bias)
        # One scalar per call (its reduction="none" is not trusted: Liger-Kernel issues #872, #968): the
        # micro-batch is attributed whole (exact when its records share one group, else "mixed").
        return total, n, output, _attributed(batch, total, n, groups) if groups else None

    def piece(h, y):
        return F.cross_entropy(head(h).float(), y, reduction="sum")

    def grouped_piece(h, y, g):  # the chunk's terms summed into their groups: (groups + 1,)
        return h.new_zeros(groups + 1, dtype=torch.float32).index_add(0, g, F.cross_entropy(head(h).float(), y,
                                                                                            reduction="none"))

    vocab = getattr(head, "out_features", None) or head.weight.shape[0]
    step = chunk_rows(rows.shape[0], rows.shape[-1], vocab)
    ckpt = torch.is_grad_enabled()
    if groups:
        group = batch[LOSS_GROUP][:, 1:].to(hidden.device).long()[keep]
        sums = rows.new_zeros(groups + 1, dtype=torch.float32)
        for i in range(0, rows.shape[0], step):
            h, y, g = rows[i:i + step], targets[i:i + step], group[i:i + step]
            sums = sums + (checkpoint(grouped_piece, h, y, g, use_reentrant=False) if ckpt else grouped_piece(h, y, g))
        counts = sums.new_zeros(groups + 1).index_add(0, group, torch.ones_like(group, dtype=torch.float32))
        return sums.sum(), n, output, torch.stack([sums.detach(), counts])
    total = rows.new_zeros((), dtype=torch.float32)
    for i in range(0, rows.shape[0], step):
        h, y = rows[i:i + step], targets[i:i + step]
        # Checkpointed: backward recomputes this chunk's logits instead of keeping every chunk's.
        total = total + (checkpoint(piece, h, y, use_reentrant=False) if ckpt else piece(h, y))
    return total, n, output, None


def to_device(batch: dict, device) -> dict:
    """The batch on `device`. A host tensor stays as it is for a CPU run: accelerate names the device of a
    multi-process CPU run `cpu:0`, and `Tensor.to("cpu:0")` copies a host tensor (whose device reads `cpu`),
    so every micro-batch's inputs (an image's pixels included) existed twice on each CPU rank."""
    if getattr(device, "type", str(device).partition(":")[0]) == "cpu":
        return {k: (v.to("cpu") if hasattr(v, "to") else v) for k, v in batch.items()}
    return {k: (v.to(device, non_blocking=True) if hasattr(v, "to") else v) for k, v in batch.items()}
