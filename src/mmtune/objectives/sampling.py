"""GRPO's sampler is the policy: a generation config that holds the run's settings and nothing of the model's.

`generate` starts from the model's own generation_config.json and lets call arguments override it, so a setting
the call does not name comes from the checkpoint: Qwen2.5's `repetition_penalty: 1.05`, a `no_repeat_ngram_size`,
`min_new_tokens`, `bad_words_ids`, `min_p`, a `top_k: 1` where the call leaves top_k unset (TRL's GRPO with
transformers >= 4.50 sampled near-greedily that way: https://github.com/huggingface/trl/issues/5783). Each bends
the sampling distribution away from softmax(logits / temperature), the distribution whose log-probabilities the
GRPO loss takes, and can collapse a group's completions into one (zero reward std, no learning). So the step
samples from a fresh GenerationConfig with only the run's settings, the end-of-sequence and pad ids, and swaps it
in for the call: fields left unset there are transformers' neutral defaults, not the checkpoint's.
"""

from __future__ import annotations

from contextlib import contextmanager


def policy_sampling_config(*, temperature: float, max_new_tokens: int, pad_token_id, eos_token_id, suppress_tokens):
    """Pure sampling at `temperature`: no top-k / top-p / penalties / n-gram bans / length floors."""
    from transformers import GenerationConfig

    return GenerationConfig(do_sample=True, temperature=temperature, top_k=0, top_p=1.0, min_p=None, typical_p=1.0,
                            repetition_penalty=1.0, no_repeat_ngram_size=0, min_length=0, min_new_tokens=None,
                            max_new_tokens=max_new_tokens, num_beams=1, pad_token_id=pad_token_id,
                            eos_token_id=eos_token_id, suppress_tokens=suppress_tokens)


@contextmanager
def sampling_as(model, config):
    """`model`'s generation_config is `config` inside the block, the model's own again after (also on error):
    generate fills what a passed config leaves unset from `model.generation_config`, so the swap is what keeps
    the checkpoint's settings out, and the run's saved model keeps its generation_config.json unchanged."""
    from transformers import GenerationConfig

    # every module holding one: a peft model forwards generate to the transformers model inside it, whose own
    # attribute is the one generate reads
    held = [(m, m.__dict__["generation_config"]) for m in model.modules()
            if isinstance(m.__dict__.get("generation_config"), GenerationConfig)]
    for m, _ in held:
        m.generation_config = config
    try:
        yield
    finally:
        for m, saved in held:
            m.generation_config = saved
