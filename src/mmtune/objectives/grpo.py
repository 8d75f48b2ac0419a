"""Group relative policy optimisation (Shao et al. 2024, DeepSeekMath), on-policy, one update per generation.

A micro-batch holds B prompts (left-padded, their media, their references: data/prompts.py). Per micro-batch:
1. sample G completions per prompt from the model itself (HF `generate`, eval mode, no_grad; G calls of B
   rows, so each call takes the batch's media as they are), at `temperature`, up to `max_completion_length`
   new tokens, never a media placeholder token; a completion ends at its first end-of-sequence token;
2. score each completion with the rewards (mmtune.evaluate.rewards: the task metrics), summed with weights;
3. advantages: each reward minus its group's mean, over the group's standard deviation (+1e-4);
4. the clipped objective per completion token, `-min(r * A, clip(r, 1 - eps, 1 + eps) * A)` with
   r = pi / pi_old, plus `beta * KL(pi || pi_ref)` (the k3 estimator) when beta > 0, averaged over each
   completion's tokens; the step averages over its completions (B x G per micro-batch, all ranks).
With one update per generation pi_old is the sampling policy itself (r = 1, its gradient that of log pi), so
the clip never binds: `clip_ratio` is logged, and is 0 here, as in TRL with num_iterations=1.

Logged: reward (mean) and reward_std (the weighted sum), reward/<name> and reward/<name>_std per function
(unweighted), completion_length (mean new tokens), kl (when beta > 0), clip_ratio, frac_reward_zero_std (the
share of groups whose rewards are all equal: no gradient from them), frac_completions_truncated (the share cut at
max_completion_length).
"""

from __future__ import annotations

from ..data.prompts import REFS, references
from ..loss import extract_logits, model_inputs


class GRPO:
    name = "grpo"
    unit = "completions"

    def __init__(self, cfg, reference, tokenizer, never_sample=()):
        from ..evaluate.rewards import reward_function

        self.cfg, self.reference, self.tok = cfg, reference, tokenizer
        self.never = list(never_sample)  # token ids suppressed while sampling (the media placeholders)
        self.rewards = [(r.name, r.weight, reward_function(r.name, r.pattern)) for r in cfg.rewards]
        eos = tokenizer.eos_token_id
        self.eos = [eos] if isinstance(eos, int) else list(eos or [])
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (self.eos or [0])[0]

    @property
    def reference_model(self):
        return self.reference.model if self.cfg.beta > 0 else None

    def count(self, mb) -> int:
        return int(mb["input_ids"].shape[0]) * self.cfg.generations

    def empty_step(self) -> str:
        return "this step has no prompt"

    def _sample(self, model, prompt: dict):
        import torch

        from .sampling import policy_sampling_config, sampling_as

        inner = getattr(model, "module", model)
        # the run's sampling settings only: the checkpoint's generation_config.json (repetition penalty, top-k,
        # n-gram bans...) would sample from another distribution than the one the loss takes (sampling.py)
        gen = policy_sampling_config(temperature=self.cfg.temperature, max_new_tokens=self.cfg.max_completion_length,
                                     pad_token_id=self.pad, eos_token_id=self.eos or None,
                                     suppress_tokens=self.never or None)
        was = inner.training
        inner.eval()
        try:
            with torch.no_grad(), sampling_as(inner, gen):
                return [inner.generate(**prompt, generation_config=gen)[:, prompt["input_ids"].shape[1]:]
                        for _ in range(self.cfg.generations)]
        finally:
            inner.train(was)

    def _ended(self, completion):
        """(rows,) bool: the completion holds an end-of-sequence token (else it was cut at max_completion_length)."""
        import torch

        ended = torch.zeros(completion.shape[0], dtype=torch.bool, device=completion.device)
        for e in self.eos:
            ended |= (completion == e).any(dim=1)
        return ended

    def _mask(self, completion):
        """1 up to and including each row's first end-of-sequence token, 0 after."""
        import torch

        is_eos = torch.zeros_like(completion, dtype=torch.bool)
        for e in self.eos:
            is_eos |= completion == e
        after = (is_eos.cumsum(dim=1) - is_eos.long()) > 0  # positions after the first eos
        return (~after).long()

    def loss_sum(self, model, mb, *, impl: str = "full", **forward_kwargs):
        import torch
        import torch.nn.functional as F

        from ..evaluate.rewards import score

        if forward_kwargs:
            raise ValueError("train.objective=grpo takes no auxiliary-loss inputs")
        refs = references(mb)
        prompt = {k: v for k, v in model_inputs(mb).items() if k != REFS}
        ids = prompt["input_ids"]
        B, P = ids.shape
        G = self.cfg.generations
        completions = self._sample(model, prompt)
        masks = [self._mask(c) for c in completions]
        texts = [self.tok.batch_decode(c * m + self.pad * (1 - m), skip_special_tokens=True)
                 for c, m in zip(completions, masks)]
        rewards = torch.zeros(B, G, dtype=torch.float64)
        stats = {}
        for name, weight, fn in self.rewards:
            got = torch.tensor([score(fn, name, texts[g], refs) for g in range(G)], dtype=torch.float64).T  # (B, G)
            rewards += weight * got
            stats[f"reward/{name}"] = got.sum()
            stats[f"reward/{name}_sq"] = (got ** 2).sum()  # for its std over the step (parts)
        adv = (rewards - rewards.mean(dim=1, keepdim=True)) / (rewards.std(dim=1, keepdim=True) + 1e-4)
        total = None
        kl_sum = torch.zeros((), dtype=torch.float64)
        clip_sum = torch.zeros((), dtype=torch.float64)
        for g in range(G):
            c, m = completions[g], masks[g]
            inputs = dict(prompt)
            for k, v in prompt.items():  # per-token keys grow by the completion: the mask by its own, others by 0
                if isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape == (B, P) and k != "input_ids":
                    inputs[k] = torch.cat([v, m.to(v.dtype) if k == "attention_mask" else torch.zeros_like(c, dtype=v.dtype)], 1)
            inputs["input_ids"] = torch.cat([ids, c], dim=1)
            logits = extract_logits(model(**inputs, use_cache=False))[:, P - 1:-1, :].float()
            logp = -F.cross_entropy(logits.reshape(-1, logits.size(-1)), c.reshape(-1), reduction="none").view(c.shape)
            ratio = torch.exp(logp - logp.detach())
            a = adv[:, g].to(logp.dtype).unsqueeze(1)
            eps = self.cfg.epsilon
            per_tok = -torch.min(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a)
            # tokens whose clip binds (TRL's rule: below 1 - eps with a negative advantage, above 1 + eps with a
            # positive one); with one update per generation r = 1 and none does, but it is counted, not assumed
            clipped = (((ratio < 1 - eps) & (a < 0)) | ((ratio > 1 + eps) & (a > 0))).detach().to(m.dtype)
            clip_sum += ((clipped * m).sum(1) / m.sum(1).clamp(min=1)).double().sum()
            if self.cfg.beta > 0:
                with torch.no_grad(), self.reference.active(model) as ref:
                    ref_logits = extract_logits(ref(**inputs, use_cache=False))[:, P - 1:-1, :].float()
                    ref_logp = -F.cross_entropy(ref_logits.reshape(-1, ref_logits.size(-1)), c.reshape(-1),
                                                reduction="none").view(c.shape)
                d = ref_logp - logp
                kl = torch.exp(d) - d - 1
                per_tok = per_tok + self.cfg.beta * kl
                kl_sum += ((kl.detach() * m).sum(1) / m.sum(1).clamp(min=1)).double().sum()
            seq = (per_tok * m).sum(dim=1) / m.sum(dim=1).clamp(min=1)
            total = seq.sum() if total is None else total + seq.sum()
        lengths = torch.stack([m.sum(dim=1) for m in masks]).double()
        # the two ways a step learns nothing, counted per completion so the step's mean is a share (TRL's names):
        # a group whose G rewards are all equal has advantages 0 (no policy gradient from its prompt), and a
        # completion that never reached an end of sequence was cut at max_completion_length (its answer may be
        # missing, so its reward says nothing about it)
        zero_std = (rewards.std(dim=1) < 1e-6).double() * G  # (B,): each group's G completions
        truncated = torch.stack([~self._ended(c) for c in completions]).double()
        stats.update({"reward": rewards.sum(), "reward_sq": (rewards ** 2).sum(), "completion_length": lengths.sum(),
                      "clip_ratio": clip_sum, "frac_reward_zero_std": zero_std.sum(),
                      "frac_completions_truncated": truncated.sum()})
        if self.cfg.beta > 0:
            stats["kl"] = kl_sum
        return total, None, stats

    def step_note(self, parts: dict, step: int) -> str | None:
        """A line for the progress display when a whole step learned nothing from its samples (once per kind)."""
        said = self.__dict__.setdefault("_said", set())
        notes = []
        if parts.get("frac_reward_zero_std", 0.0) >= 1.0 and "zero_std" not in said:
            said.add("zero_std")
            notes.append(f"step {step}: every prompt's {self.cfg.generations} completions got the same reward "
                         "(frac_reward_zero_std 1): advantages 0, no policy gradient from this step's samples. If it "
                         "stays so: rewards that vary between answers (a partial-credit reward beside exact_match), "
                         "a higher train.grpo.temperature, more train.grpo.generations, or prompts the model "
                         "sometimes answers right")
        if parts.get("frac_completions_truncated", 0.0) >= 1.0 and "truncated" not in said:
            said.add("truncated")
            notes.append(f"step {step}: every completion was cut at train.grpo.max_completion_length="
                         f"{self.cfg.max_completion_length} tokens without an end of sequence "
                         "(frac_completions_truncated 1): answers that end later are scored cut. If it stays so: "
                         "raise train.grpo.max_completion_length")
        return "; ".join(notes) or None

    def parts(self, sums: dict, n: int) -> dict:
        """Means over the step's n completions; each `<key>_sq` sum becomes `<key>_std` (the std over them)."""
        out = {k: v / n for k, v in sums.items() if not k.endswith("_sq")}
        for k in sums:
            if k.endswith("_sq"):
                mean = out[k[:-3]]
                out[k[:-3] + "_std"] = max(sums[k] / n - mean ** 2, 0.0) ** 0.5
        return out
