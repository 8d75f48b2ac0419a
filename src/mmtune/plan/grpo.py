"""What the plan traces of a GRPO step (train.objective=grpo): its generation phase, then the training forward
and backward over the G completions of each prompt, at the point of the loop where the run has them.

The step is the run's own (`objectives/grpo.GRPO.loss_sum`, through the loop's `optimizer_step`); only the
sampling is replaced, since a sample is a value the fake tensors do not have:
- generation (`_sample`): the run makes G `generate` calls of the micro-batch's B prompts, one after the other,
  in eval mode under no_grad. One call is traced: the prompt forward with a KV cache (the vision tower runs
  here), then the cache's growth to prompt + max_completion_length tokens added analytically, as the eval
  generation does (plan/execute.run_eval): the cache at full length, DynamicCache's one-layer `torch.cat`
  copy, and the sampler's fp32 logits, scaled logits and probabilities of the last position, alive through
  the last decode step. The other G - 1 calls allocate the same and free it before the next starts, so the
  generation peak is one call's; the step's state (weights, optimizer state, the previous micro-batch's
  gradients) is alive around it, as in the run;
- the completions: every one `max_completion_length` tokens long with no end-of-sequence token (the worst
  case: the whole completion is trained on), fed to the run's loss code: G forwards of B rows at prompt +
  completion length whose activations all stay alive until the one backward, the reference forward under
  no_grad per completion when beta > 0 (adapters disabled, or the frozen copy held as weights), the fp32
  log-probabilities. The rewards are not called (the plan runs no user code): advantages are 0, which
  changes no tensor's size.

Generation time (not traced op by op: decode is memory-bandwidth bound): per call, the traced prompt
forward's roofline time, plus per new token one read of the decoder's weights (the vision / audio towers and
projector are not read while decoding) and of the B rows' KV cache at its mean length, at the GPU's
bandwidth x timing.BANDWIDTH_EFFICIENCY. G calls per micro-batch, grad_accum micro-batches per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..objectives.grpo import GRPO

NOT_READ_WHILE_DECODING = ("vision", "audio", "projector")


@dataclass
class GenerationTrace:
    calls_traced: int = 0  # _sample calls while costs were recorded (the last step's micro-batches)
    batch_size: int = 0  # B prompts per micro-batch
    prompt_tokens: int = 0
    kv_cache_bytes: int = 0  # one call's cache at prompt + completion length
    above_bytes: int = 0  # the largest rise of live tensors during one call, over what was live at its start
    decode_step_bytes: int = 0  # what the analytic block holds through the last decode step
    info: dict = field(default_factory=dict)


class PlannedGRPO(GRPO):
    """The run's GRPO objective with sampling replaced by a traced generation phase and worst-case completions.
    `mode`: the plan's ValueFakeMode (its `tracker` is set while the steps run)."""

    def __init__(self, cfg, reference, tokenizer, mode):
        super().__init__(cfg, reference, tokenizer)
        self.rewards = []  # no user code in a plan; advantages 0 change no tensor's size
        self.mode = mode
        self.gen = GenerationTrace()
        ids = [i for i in range(min(int(getattr(tokenizer, "vocab_size", 0) or 0), 1000)) if i not in self.eos]
        self.fill = ids[-1] if ids else 0  # any token that is no end-of-sequence: completions run to full length

    def _sample(self, model, prompt: dict):
        import torch

        from ..loss import extract_logits
        from .execute import _accepts, _cache_tensors

        tracker = self.mode.tracker
        inner = getattr(model, "module", model)
        was, saved = inner.training, (tracker.phase, tracker.tag)
        inner.eval()
        ids = prompt["input_ids"]
        B, P = ids.shape
        C = self.cfg.max_completion_length
        tracker.phase, tracker.tag = "generation", ""
        trace, start = tracker.trace, len(tracker.trace.events)
        before = trace.live_bytes
        try:
            with torch.no_grad():
                inputs = dict(prompt)
                if _accepts(inner, "logits_to_keep"):
                    inputs["logits_to_keep"] = 1  # generate keeps the last position's logits only
                # .forward, not __call__: the plan's phase hooks on the model would file it as a training forward
                out = inner.forward(**inputs, use_cache=True)
                cache, logits = getattr(out, "past_key_values", None), extract_logits(out)
                del out
                kv = _cache_tensors(cache)
                per_token = sum(t.numel() * t.element_size() for t in kv) / max(1, P)
                full = int(per_token * (P + C))
                # the last decode step: the cache grown by C tokens, DynamicCache's torch.cat copy of one layer
                # at full length, and the sampler's fp32 logits, logits / temperature and softmax of one position
                last = int(per_token * C + full / max(1, len(kv)) + 3 * B * logits.shape[-1] * 4)
                with tracker.held(last, "generation", "decode_step_analytic"):
                    pass
                del cache, kv, logits
        finally:
            inner.train(was)
            tracker.phase, tracker.tag = saved
        g = self.gen
        live, top = before, before
        for ev in trace.events[start:]:
            live += ev.nbytes
            top = max(top, live)
        g.above_bytes = max(g.above_bytes, top - before)
        if tracker.record_costs:
            g.calls_traced += 1
        g.batch_size, g.prompt_tokens, g.kv_cache_bytes, g.decode_step_bytes = B, P, full, last
        fill = torch.full((B, C), self.fill, dtype=ids.dtype)  # integer factory: computed for real (fake.py)
        return [fill for _ in range(self.cfg.generations)]


def planned_objective(resolved, pm, mode, reference):
    """The objective the plan traces for a grpo run (its reference: the frozen copy, else adapters disabled)."""
    from ..objectives.dpo import AdaptersOff, FrozenCopy

    proc = pm.processor if pm.processor is not None else resolved.processor
    tok = getattr(proc, "tokenizer", proc)
    ref = FrozenCopy(reference) if reference is not None else AdaptersOff()
    return PlannedGRPO(resolved.cfg.train.grpo, ref, tok, mode)


def decoder_weight_bytes(model, family) -> int:
    """Bytes of the weights a decode step reads: every parameter and buffer but the vision / audio towers' and
    the projector's (4-bit weights at their packed size)."""
    from ..adapters import component_of

    total = 0
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if family is None or component_of(family, name) not in NOT_READ_WHILE_DECODING:
            total += p.numel() * p.element_size()
    return total


def generation_time(costs, gen: GenerationTrace, *, generations: int, max_new_tokens: int, weight_bytes: int,
                    tflops: float, bandwidth_gbs: float) -> dict:
    """Seconds of one micro-batch's generation phase: G x (the traced prompt forward + C decode steps)."""
    from .timing import BANDWIDTH_EFFICIENCY, LAUNCH_S, _op_time

    prefill = sum(_op_time(f, b, tflops, bandwidth_gbs) for f, b, ph in costs if ph == "generation")
    prefill /= max(1, gen.calls_traced)
    n_ops = sum(1 for *_, ph in costs if ph == "generation") / max(1, gen.calls_traced)
    per_token_kv = gen.kv_cache_bytes / max(1, gen.prompt_tokens + max_new_tokens)
    mean_kv = per_token_kv * (gen.prompt_tokens + max_new_tokens / 2)
    decode_token = (weight_bytes + mean_kv) / (bandwidth_gbs * 1e9 * BANDWIDTH_EFFICIENCY) + n_ops * LAUNCH_S
    per_call = prefill + max_new_tokens * decode_token
    return {"prefill_s_per_call": prefill, "decode_s_per_token": decode_token,
            "generation_s_per_micro_batch": generations * per_call, "decode_weight_bytes": int(weight_bytes)}


def grpo_plan_parts(objective, tr, pm, cfg, *, tflops: float, bandwidth_gbs: float,
                    step_time_s: float) -> tuple[dict, float, str, list[str]]:
    """(the plan's `generation` record, the step time with the generation phase, the named peak phase, decision
    lines) of a traced grpo run."""
    from .planner import _phase_peaks

    g, gcfg = objective.gen, cfg.train.grpo
    gen_peak = max([0] + _phase_peaks(tr, ("generation",)))
    train_peak = max([0] + _phase_peaks(tr, ("forward", "loss", "backward", "dequant", "optimizer")))
    t = generation_time(tr.costs, g, generations=gcfg.generations, max_new_tokens=gcfg.max_completion_length,
                        weight_bytes=decoder_weight_bytes(pm.model, pm.family), tflops=tflops, bandwidth_gbs=bandwidth_gbs)
    gen_step = t["generation_s_per_micro_batch"] * cfg.train.grad_accum
    step = step_time_s + gen_step
    phase = "generation" if tr.peak_phase == "generation" else f"training ({tr.peak_phase})"
    record = {"generations": gcfg.generations, "prompts_per_micro_batch": g.batch_size, "prompt_tokens": g.prompt_tokens,
              "max_completion_length": gcfg.max_completion_length, "kv_cache_bytes": g.kv_cache_bytes,
              "generation_above_state_bytes": g.above_bytes,
              "generation_peak_bytes": int(gen_peak), "training_peak_bytes": int(train_peak),
              "generation_s_per_step": gen_step, "training_s_per_step": step_time_s,
              "sequences_per_micro_batch": g.batch_size * gcfg.generations, **t}
    lines = [f"grpo: generation planned as {gcfg.generations} generate calls of {g.batch_size} prompt(s) x "
             f"{g.prompt_tokens} tokens, {gcfg.max_completion_length} new tokens each (KV cache "
             f"{g.kv_cache_bytes / 2**30:.2f} GiB per call; prompt forward traced, decode bandwidth-bound: "
             f"{t['decode_s_per_token'] * 1e3:.2f} ms/token); training over {g.batch_size * gcfg.generations} "
             f"sequences of {g.prompt_tokens + gcfg.max_completion_length} tokens per micro-batch, every completion "
             "at full length (plan/grpo.py)",
             f"grpo: peak in the {phase} phase (generation {gen_peak / 2**30:.2f} GiB, training "
             f"{train_peak / 2**30:.2f} GiB of live tensors); step time {step:.2f} s = generation {gen_step:.2f} s + "
             f"training {step_time_s:.2f} s"]
    return record, step, phase, lines
