"""The one optimizer step, shared by the loop (real tensors) and the planner (fake tensors).

Loss normalisation: every micro-batch contributes its *sum* of answer-token cross entropies, and the
sum is divided by the number of answer tokens in the whole accumulated step (across ranks in DDP).
So the logged loss is the true token-weighted mean of the step, whatever the accumulation or padding,
and it is computed from detached fp32 values before any gradient scaling (failure mode 22).

Auxiliary losses (mmtune.aux_losses) join the same backward: each micro-batch adds
`weight * aux_sum / (records with a target in the step)` to its scaled LM sum, so the gradient is that
of `lm_loss + sum(weight * aux/<name>)` whatever the accumulation, ranks or fp16 loss scale, and the
logged parts are the unscaled means.

Objectives (mmtune.objectives, train.objective) plug in here and nowhere else: the objective says how
many units the step averages over (answer tokens for sft, pairs for dpo), computes each micro-batch's
loss sum (dpo: chosen and rejected rows in one forward, the reference forward under no_grad), and names
what it logs besides the loss (dpo: rewards/...). The accumulation, ranks, scaling, clipping and the
planner's trace are the same for every objective.

Loss by modality (`loss_groups`, data/modality.py: a run whose data mixes image / video / audio / text-only
records): the micro-batches carry each token's group, sft sums its loss per group on the device (mmtune.loss.
grouped_loss_sums), the step adds those sums up as it does the loss and reads them once, after the last
micro-batch, summed over ranks: `loss/<modality>` is the token-weighted mean over that modality's answer tokens
of the step, `answer_tokens/<modality>` its count, so sum(loss/m x answer_tokens/m) / answer_tokens is the LM
loss. A one-modality run's batches carry no group and take the path above unchanged.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field

from ..loss import (  # noqa: F401 - shared
    IGNORE_INDEX,
    LOSS_GROUP,
    TOKEN_MASK,
    count_answer_tokens,
    extract_logits,
    loss_sum,
    loss_sum_and_output,
    to_device,
)


@dataclass
class StepResult:
    loss: float  # token-weighted mean over the accumulated step (all ranks)
    answer_tokens: int  # answer tokens in the step (all ranks)
    input_tokens: int  # all non-pad tokens processed by this rank
    grad_norm: float | None
    skipped: bool = False  # fp16 overflow: the scaler skipped the update (or a non-finite gradient norm did)
    nonfinite_grad: bool = False  # the gradient norm was nan / inf without a GradScaler: the update was skipped
    # With auxiliary losses: {"lm_loss": ..., "aux/<name>": unweighted mean or None when no record of the
    # step has a target}; `loss` is then lm_loss + sum(weight * aux).
    parts: dict = field(default_factory=dict)
    # The learning rate this step's update used (param group 0), read before the scheduler moves it on: the
    # optimizer's lr after the step is the *next* step's (a warmup's step 1 showed step 2's rate, a decay's
    # last step showed 0).
    lr: float | None = None


def optimizer_step(model, optimizer, scheduler, micro_batches, *, accelerator, max_grad_norm,
                   trainable_params, world_tokens=None, aux=None, step: int = 0, inactive=(),
                   loss_impl: str = "full", objective=None, during_backward=nullcontext,
                   loss_groups: tuple = ()) -> StepResult:
    """Forward + backward over the micro-batches of one step, then clip, step, schedule, zero grads.

    `world_tokens(n)` sums a token count over ranks (identity on one process). DDP averages gradients
    over ranks, so each rank scales its loss by world_size / global_tokens to get the global mean.
    `aux`: AuxTerms (train.aux_losses) weighted for 0-based `step`. `inactive`: parameters whose gradient
    is dropped before the update (staged unfreezing under FSDP: stages.StagedParams.inactive). `loss_impl`:
    the resolved train.loss_impl (mmtune.loss: full / chunked / liger). `objective`: the run's
    (mmtune.objectives; default sft): what the loss is averaged over, how a micro-batch's sum is computed,
    and what it logs besides the loss. `during_backward()`: a context each backward runs in (the prefetch thread's
    window, train/prefetch.py). `loss_groups`: the run's modalities when its data mixes them (data/modality.py;
    the micro-batches then carry `loss_group`): the step also logs the loss of each.
    """
    import torch

    device = accelerator.device
    world_tokens = world_tokens or (lambda n: n)
    if objective is None:
        from ..objectives import SFT

        objective = SFT()
    # The units the step's loss is averaged over: answer tokens (sft), pairs (dpo); all ranks.
    global_tokens = world_tokens(sum(objective.count(mb) for mb in micro_batches))
    if global_tokens == 0:
        raise ValueError(objective.empty_step())
    # (a prompt-only batch, grpo's, has no labels: its answers are sampled inside the step)
    answer_tokens = global_tokens if objective.name == "sft" else \
        world_tokens(sum(count_answer_tokens(mb["labels"]) for mb in micro_batches if "labels" in mb))
    stat_sums: dict = {}
    scale = accelerator.num_processes / global_tokens
    # Counted on the host batch and summed on the device: no device-to-host sync per micro-batch.
    # A packed batch, or one whose padding mask the run leaves out (attention.padding_mask), has `token_mask` instead.
    masks = [mb.get("attention_mask", mb.get(TOKEN_MASK)) for mb in micro_batches]
    input_tokens = sum(int(m.sum()) if m is not None else mb["input_ids"].numel() for m, mb in zip(masks, micro_batches))
    loss_acc = torch.zeros((), dtype=torch.float64, device=device)
    # Auxiliary terms: records with a target in the step (all ranks), from integer inputs of the host batch
    # (real even in the planner); a term without any, or at weight 0, is not computed this step.
    terms = []
    for term in aux or []:
        n = world_tokens(sum(int(mb[term.loss.has_key()].sum()) for mb in micro_batches))
        terms.append((term, term.weight_at(step), n, torch.zeros((), dtype=torch.float64, device=device)))
    active = [t for t in terms if t[1] > 0 and t[2] > 0]
    forward_kwargs = {k: v for t in active for k, v in t[0].loss.model_kwargs.items()}
    # DeepSpeed (train.strategy=zero2/zero3) accumulates itself: its engine divides each backward by the
    # accumulation steps and steps on the last, which `accelerator.accumulate` marks; the objective is
    # multiplied back so the gradient is the same token-normalised one.
    deepspeed = getattr(accelerator, "distributed_type", None) == "DEEPSPEED"
    gas = len(micro_batches) if deepspeed else 1
    # (sums, answer tokens) per group on the device, as loss_acc: read once after the step, never per micro-batch
    split = {"groups": len(loss_groups)} if loss_groups and all(LOSS_GROUP in mb for mb in micro_batches) else {}
    group_acc = torch.zeros((2, len(loss_groups) + 1), dtype=torch.float64, device=device) if split else None
    for i, mb in enumerate(micro_batches):
        mb = to_device(mb, device)
        last = i == len(micro_batches) - 1
        # Gradients are synchronised across ranks only on the last micro-batch of the step.
        if hasattr(model, "set_requires_gradient_sync"):  # FSDP2: no no_sync(); the same switch, by call
            model.set_requires_gradient_sync(last)
            ctx = nullcontext()
        elif deepspeed:
            ctx = accelerator.accumulate(model)
        else:
            ctx = accelerator.no_sync(model) if (not last and accelerator.num_processes > 1) else nullcontext()
        with ctx, accelerator.autocast():
            total, output, stats = objective.loss_sum(model, mb, impl=loss_impl, **split, **forward_kwargs)
            scaled = total * (scale * gas)
            for term, weight, n, acc in active:
                value = term.loss(mb, output)
                scaled = scaled + value * (weight * accelerator.num_processes * gas / n)
                acc += value.detach().double()
            del output
            with during_backward():
                accelerator.backward(scaled)
        loss_acc += total.detach().double()
        if split:
            group_acc += stats.pop("loss_groups").double()
        for k, v in stats.items():
            stat_sums[k] = stat_sums[k] + v if k in stat_sums else v
    for p in inactive:
        p.grad = None
    grad_norm = None
    if max_grad_norm is not None:
        norm = accelerator.clip_grad_norm_(trainable_params, max_grad_norm)
        full = getattr(norm, "full_tensor", None)  # sharded gradients (FSDP2): the norm is a DTensor
        grad_norm = float(full() if full is not None else norm) if norm is not None else None
    # A non-finite gradient norm beside a finite loss (an overflow in the backward only): clipping multiplies
    # every gradient by max_norm / nan, and the update writes NaN into the weights, which the next step's loss
    # shows, blaming that step's records (or the run ends and saves them). fp16's GradScaler skips such a step
    # itself; without one (bf16, fp32) the update is skipped here and said (StepResult.nonfinite_grad).
    nonfinite_grad = (grad_norm is not None and not math.isfinite(grad_norm) and not deepspeed
                      and getattr(accelerator, "scaler", None) is None)
    groups = getattr(optimizer, "param_groups", None)
    lr = float(groups[0]["lr"]) if groups else None
    if not nonfinite_grad:
        optimizer.step()
    skipped = nonfinite_grad or bool(getattr(optimizer, "step_was_skipped", False))
    if not skipped:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    lm_loss = world_tokens(float(loss_acc)) / global_tokens
    by_group = _by_group(group_acc, loss_groups, accelerator) if split else {}
    if not terms:
        logged = {**objective.parts({k: world_tokens(float(v)) for k, v in stat_sums.items()}, global_tokens),
                  **by_group}
        return StepResult(loss=lm_loss, answer_tokens=int(answer_tokens), input_tokens=input_tokens,
                          grad_norm=grad_norm, skipped=skipped, nonfinite_grad=nonfinite_grad, parts=logged, lr=lr)
    parts, loss = {"lm_loss": lm_loss, **by_group}, lm_loss
    for term, weight, n, acc in terms:
        value = None
        if weight > 0 and n > 0:  # computed this step (`active`)
            value = world_tokens(float(acc)) / n
            loss += weight * value
        parts[f"aux/{term.name}"] = value
        parts[f"aux_weight/{term.name}"] = weight
    return StepResult(loss=loss, answer_tokens=int(answer_tokens), input_tokens=input_tokens,
                      grad_norm=grad_norm, skipped=skipped, nonfinite_grad=nonfinite_grad, parts=parts, lr=lr)


def _by_group(acc, names: tuple, accelerator) -> dict:
    """`loss/<group>` and `answer_tokens/<group>` of the groups with answer tokens in the step (all ranks): one
    read of the (2, groups + 1) device sums; the last column is "mixed" (mmtune.loss.grouped_loss_sums)."""
    from ..data.modality import MIXED

    if accelerator.num_processes > 1:
        acc = accelerator.reduce(acc, reduction="sum")
    sums, counts = acc.tolist()
    out = {}
    for name, s, n in zip((*names, MIXED), sums, counts):
        if n > 0:
            out[f"loss/{name}"] = s / n
            out[f"answer_tokens/{name}"] = int(round(n))
    return out
