"""Execute the training loop's own step (`mmtune.train.step.optimizer_step`) on fake tensors.

Two optimizer steps run: AdamW creates its state inside the first step, so the second step's forward
and backward run with the state alive, which is where full fine-tuning peaks. The first step runs one
micro-batch (it only has to create the state); the second runs min(grad_accum, 2): from the second
micro-batch on, gradients already exist and every later micro-batch repeats the second's allocations
exactly, so more would only cost time. Op costs (for the time model) are recorded in the second step.

`PlanAccelerator` stands in for accelerate's Accelerator with the five things the step uses (device,
num_processes, no_sync, autocast, backward, clip_grad_norm_), on fake tensors here and on a real device in
`plan --verify` (verify.py); fp16 loss scaling is a scalar multiply and an in-place unscale, so it
allocates nothing that matters (and random weights do not overflow in a few steps) and is left out.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from ..compat.torch_internals import in_autograd_backward, tree_leaves
from .tracker import StorageTracker


class PlanAccelerator:
    num_processes = 1

    def __init__(self, compute_dtype, after_backward=None, device="cpu"):
        self.device = torch.device(device)
        self.compute_dtype = compute_dtype
        self.after_backward = after_backward  # layer_dedup.LayerDedup: splice the copied layers in

    def no_sync(self, model):
        return contextlib.nullcontext()

    def autocast(self):
        if self.compute_dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)

    def backward(self, loss):
        loss.backward()
        if self.after_backward is not None:
            self.after_backward()

    def clip_grad_norm_(self, params, max_norm):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)


@dataclass
class Execution:
    tracker: StorageTracker
    param_serials: dict = field(default_factory=dict)  # serial -> "weights" | "trainable"
    grad_serials: set = field(default_factory=set)
    state_serials: set = field(default_factory=set)
    input_serials: set = field(default_factory=set)
    train_peak_bytes: int = 0
    paged_bytes: int = 0  # paged optimizer state (unified memory, outside the tracker: plan/optim8bit.py)
    copied_layers: dict = field(default_factory=dict)  # stack name -> layers whose events were copied (layer_dedup)
    eval_info: dict = field(default_factory=dict)


def _phase_hooks(model, tracker: StorageTracker):
    handles = []

    def pre(mod, args, kwargs=None):
        if not in_autograd_backward():
            # A new micro-batch's forward: the previous one's loss left the "logits" tag set; without
            # this reset every activation of micro-batch 2+ was filed under logits_loss.
            tracker.phase, tracker.tag = "forward", ""

    def post(mod, args, out):
        if not in_autograd_backward():
            tracker.phase = "loss"
            tracker.tag = "logits"

    handles.append(model.register_forward_pre_hook(pre))
    handles.append(model.register_forward_hook(post))
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        handles.append(head.register_forward_pre_hook(lambda m, a: setattr(tracker, "tag", "logits")))
        handles.append(head.register_forward_hook(lambda m, a, o: setattr(tracker, "tag", "")))
    return handles


def run_steps(model, optimizer, scheduler, micro_batch: dict, *, mode, grad_accum: int, compute_dtype,
              max_grad_norm, trainable_params, steps: int = 2, cpu_kernels: bool = False,
              aux=None, loss_impl: str = "full", attention=None, dedup_groups=None,
              step_batches=None, objective=None) -> Execution:
    """`dedup_groups` (layer_dedup.find_groups): stacks of identical layers traced as four layers, the
    others' events copied from the interior one (DedupMismatch when a layer does not repeat exactly).
    `step_batches`: one micro-batch per step (as many steps), each allocated at its step's start and
    freed after it as the loop's collated batches are; default: `micro_batch` for `steps` steps."""
    from ..train.step import optimizer_step
    from .fake import ValueFunctionMode

    tracker = StorageTracker()
    if cpu_kernels:  # the run executes on this CPU: model its kernels' scratch buffers too
        tracker.cpu_kernel_threads = torch.get_num_threads()
    elif attention is not None and "flash" in attention.kernels:  # a CUDA target running FlashAttention-2
        tracker.cuda_flash = True
    ex = Execution(tracker)
    for p in model.parameters():
        s = tracker.register(p, "setup")
        if s is not None:
            ex.param_serials[s] = "trainable" if p.requires_grad else "weights"
    # bnb's quant state (4-bit absmax / codes, int8 row scales) is no parameter: FSDP2 leaves it whole on every
    # rank, so it is a class of its own (plan/distributed.py shards "weights" only)
    quant = {id(b) for m in model.modules() if type(m).__name__ in ("PlannedLinear4bit", "PlannedLinear8bit")
             for b in m.buffers(recurse=False)}
    for b in model.buffers():
        s = tracker.register(b, "setup")
        if s is not None:
            ex.param_serials.setdefault(s, "quant_state" if id(b) in quant else "weights")
    reference = getattr(objective, "reference_model", None)  # dpo's frozen copy: weights held all along
    for t in list(reference.parameters()) + list(reference.buffers()) if reference is not None else []:
        s = tracker.register(t, "setup")
        if s is not None:
            ex.param_serials.setdefault(s, "weights")
    fake_batch, serials = _fake_inputs(micro_batch, mode, tracker, "setup")
    ex.input_serials.update(serials)

    def pre_step(opt, args, kwargs):
        tracker.phase, tracker.tag = "optimizer", ""
        for p in trainable_params:
            if p.grad is not None:
                s = tracker.serial(p.grad)
                if s is not None:
                    ex.grad_serials.add(s)

    def post_step(opt, args, kwargs):
        for st in opt.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor):
                    s = tracker.serial(v)
                    if s is not None:
                        ex.state_serials.add(s)
        tracker.phase = "setup"

    from .dequant_cost import dequant_cost_hooks

    handles = _phase_hooks(model, tracker) + dequant_cost_hooks(model, tracker)
    if reference is not None:  # its forward is filed as forward activations too (freed at once: no_grad)
        handles += _phase_hooks(reference, tracker)
    h1 = optimizer.register_step_pre_hook(pre_step)
    h2 = optimizer.register_step_post_hook(post_step)
    dedup = contextlib.nullcontext()
    if dedup_groups:
        from .layer_dedup import LayerDedup

        dedup = LayerDedup(dedup_groups, tracker, mode)
    acc = PlanAccelerator(compute_dtype, after_backward=dedup.after_backward if dedup_groups else None)
    mode.tracker = tracker  # the fake mode reports each top-level op to the tracker (see fake.py)
    try:
        # attention: plan/attention.TargetAttentionMode on CUDA targets (each SDPA call as the target runs it)
        with mode, ValueFunctionMode(mode), attention or contextlib.nullcontext(), dedup:
            n_steps = steps if step_batches is None else len(step_batches)
            for i in range(n_steps):
                last = i == n_steps - 1
                tracker.record_costs = last
                n_mb = min(grad_accum, 2) if last else 1
                if step_batches is not None:  # this step's own batch, alive for the step only
                    n_mb = 1
                    fake_batch, _ = _fake_inputs(step_batches[i], mode, tracker, "setup")
                optimizer_step(model, optimizer, scheduler, [fake_batch] * n_mb, accelerator=acc,
                               max_grad_norm=max_grad_norm, trainable_params=trainable_params,
                               # auxiliary losses at full weight: the plan holds what they keep
                               aux=aux, step=max((t.start for t in aux or []), default=0),
                               loss_impl=loss_impl, objective=objective)
    finally:
        mode.tracker = None
        for h in handles + [h1, h2]:
            h.remove()
    ex.copied_layers = {g.path: g.n - 4 for g in dedup_groups or [] if g.spliced}
    return ex


def _fake_inputs(batch: dict, mode, tracker, phase: str) -> tuple[dict, set]:
    """The batch as the trace feeds it -- integer inputs (ids, masks, grids) stay real, floating media become
    fake tensors that carry their (already computed) values, for the few ops that read pixels (fake.py
    `_VALUE_KEEPING`) -- with its tensors registered in `phase`; returns it and their serials."""
    # A 1-D floating input is per-item timing (Omni's `video_second_per_grid`, Qwen2.5-VL's `second_per_grid_ts`), not
    # media: it stays real like the grids, since the M-RoPE positions computed from it in float (Qwen3-Omni) are read
    # back as Python values, which a fake float table without a value cannot give.
    fake = {k: (mode.fake_of(v, constant=True) if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() > 1
                else v) for k, v in batch.items()}
    serials = {tracker.register(v, phase) for v in fake.values() if isinstance(v, torch.Tensor)}
    return fake, serials - {None}


def breakdown_at_peak(ex: Execution) -> dict[str, int]:
    """Bytes live at the peak, by what they are."""
    tr = ex.tracker.trace
    out = {k: 0 for k in ("weights", "trainable_parameters", "gradients", "optimizer_state", "activations",
                          "logits_loss", "temporaries", "inputs", "eval", "generation")}
    for s in tr.live_at(tr.peak_index):
        st = tr.storages[s]
        if s in ex.param_serials:
            key = {"trainable": "trainable_parameters"}.get(ex.param_serials[s], ex.param_serials[s])
        elif s in ex.grad_serials:
            key = "gradients"
        elif s in ex.state_serials:
            key = "optimizer_state"
        elif s in ex.input_serials:
            key = "inputs"
        elif st.phase == "generation":
            # grpo's sampling (plan/grpo.py): prompt forward, KV cache, the sampler's logits. What outlives it into
            # training is autocast's cached casts of the trainable weights, made at their first use: as the
            # forward's own casts in an sft step, filed as activations.
            key = "generation" if tr.peak_phase == "generation" else "activations"
        elif st.phase in ("eval_loss", "eval_generation"):
            key = "eval"  # eval batch, activations, logits, KV cache
        elif st.tag == "logits" or st.phase == "loss":
            key = "logits_loss"
        elif st.phase == "forward":
            key = "activations"
        else:
            key = "temporaries"
        out[key] = out.get(key, 0) + st.nbytes
    if not out["generation"]:
        del out["generation"]  # only grpo plans have the phase
    return out


def _cache_tensors(cache) -> list:
    """Key/value tensors of a transformers cache (DynamicCache.layers[i].keys/values)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [t for lay in layers for t in (getattr(lay, "keys", None), getattr(lay, "values", None))
                if isinstance(t, torch.Tensor)]
    return [t for t in tree_leaves(cache) if isinstance(t, torch.Tensor)]


def _accepts(model, name: str) -> bool:
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return name in inspect.signature(base.forward).parameters


def run_eval(ex: Execution, model, eval_batch: dict, *, mode, compute_dtype, max_new_tokens: int,
             generate: bool, attention=None, loss_impl: str = "full") -> dict:
    """The loop's evaluation after the traced steps (state alive, gradients freed), on the same tracker.

    eval_loss: `loss.loss_sum` under no_grad on the eval batch by the run's loss path (`loss.eval_impl`: full
    fp32 logits, or chunked), as `evaluate.run_eval.eval_loss_sums` does. eval_generation (when
    eval.generate): the prompt forward with a KV cache and last-position logits (what `generate` computes),
    then one traced decode step on a cache
    that already holds the `max_new_tokens - 1` later tokens: the growth of the cache is added
    analytically (bytes per token of the traced cache x tokens, plus the growth of the one-layer
    `torch.cat` copy DynamicCache makes per step), as one block alive through that step.
    """
    from ..loss import eval_impl, loss_sum
    from .fake import ValueFunctionMode

    tracker = ex.tracker
    info = {"batch_size": int(eval_batch["input_ids"].shape[0]), "prompt_tokens": int(eval_batch["input_ids"].shape[1]),
            "max_new_tokens": int(max_new_tokens) if generate else 0, "kv_cache_bytes": 0}
    was_training = model.training
    model.eval()
    acc = PlanAccelerator(compute_dtype)
    mode.tracker = tracker
    tracker.record_costs = False
    fake_batch, _ = _fake_inputs(eval_batch, mode, tracker, "eval_loss")
    try:
        with mode, ValueFunctionMode(mode), attention or contextlib.nullcontext(), torch.no_grad(), acc.autocast():
            tracker.phase, tracker.tag = "eval_loss", ""
            total, n = loss_sum(model, fake_batch, eval_impl(loss_impl))
            del total, n
            if generate:
                tracker.phase = "eval_generation"
                inputs = {k: v for k, v in fake_batch.items() if k != "labels"}
                if _accepts(model, "logits_to_keep"):
                    inputs["logits_to_keep"] = 1
                out = model(**inputs, use_cache=True)
                from ..loss import extract_logits

                # A brought model (docs/byo_model.md) may keep no cache: its generation re-runs the whole
                # sequence, which the prompt forward traced above bounds; no cache bytes are added.
                cache, logits = getattr(out, "past_key_values", None), extract_logits(out)
                del out
                kv = _cache_tensors(cache)
                kv_bytes = sum(t.numel() * t.element_size() for t in kv)
                length = int(eval_batch["input_ids"].shape[1])
                per_token = kv_bytes / max(1, length)
                total = length + max_new_tokens
                info["kv_cache_bytes"] = int(per_token * total)
                # The last decode step: the cache at full length, DynamicCache's torch.cat copy of one
                # layer's keys at full length, and generate's fp32 copy of the last position's logits.
                last_step = int(per_token * max_new_tokens + per_token * total / max(1, len(kv))
                                + logits.shape[0] * logits.shape[-1] * 4)
                with tracker.held(last_step, "eval_generation", "decode_step_analytic"):
                    pass
                del cache, kv, logits
    finally:
        mode.tracker = None
        tracker.phase = "setup"
        model.train(was_training)
    return info
