"""The token ids generation stops at: the tokenizer's eos and every eos id the model's generation config lists.

Chat models whose turns end with a token other than the tokenizer's eos list that token in
generation_config.json: Llama 3 Instruct (eos `<|end_of_text|>`, turns end `<|eot_id|>`, generation_config
`[128001, 128009]`), Gemma 2 / 3 it (eos `<eos>`, turns end `<end_of_turn>`, `[1, 106]`), Qwen2.5 Instruct
(`[151645, 151643]`). transformers' own `generate` stops at that list; passing `eos_token_id=tokenizer.eos_token_id`
replaces it, so a model that ends its answer with the turn token runs on to max_new_tokens (vLLM had the same
bug: https://github.com/vllm-project/vllm/issues/4180, fixed by reading the list in
https://github.com/vllm-project/vllm/pull/4182). Evaluation, `mmtune chat`, `mmtune serve` and the doctor's
MM063 all take the stop set from here, so the doctor judges the stop that generation really uses.
"""

from __future__ import annotations

import json
from pathlib import Path


def stop_ids(tokenizer, listed=None) -> list[int]:
    """The tokenizer's eos first, then each id of `listed` (generation_config's `eos_token_id`: an int, a
    list, or None) not already there."""
    ids: list[int] = []
    eos = getattr(tokenizer, "eos_token_id", None)
    for i in ([eos] if eos is not None else []) + ([listed] if isinstance(listed, int) else list(listed or [])):
        if i is not None and int(i) not in ids:
            ids.append(int(i))
    return ids


def model_stop_ids(model, tokenizer) -> list[int]:
    """The stop set of a loaded model (a PeftModel reads its base model's generation_config)."""
    gen = getattr(model, "generation_config", None)
    return stop_ids(tokenizer, getattr(gen, "eos_token_id", None))


def folder_stop_ids(folder: Path | None, tokenizer) -> list[int]:
    """The stop set of a model on disk, read from its generation_config.json (no model built); the
    tokenizer's eos alone where there is no folder or no readable file."""
    listed = None
    path = folder / "generation_config.json" if folder is not None else None
    if path is not None and path.is_file():
        try:
            listed = json.loads(path.read_text()).get("eos_token_id")
        except (OSError, ValueError, AttributeError):
            listed = None  # an unreadable file is not this check's to report; the load says it
    return stop_ids(tokenizer, listed)
