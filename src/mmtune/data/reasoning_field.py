"""An assistant turn's reasoning given in a field of its own, not inline in its text.

Distillation data from DeepSeek-R1's API, vLLM's reasoning parsers and datasets built on them (e.g.
Chinese-DeepSeek-R1-Distill-data-110k) keep a turn's chain of thought in `reasoning_content` (also written
`reasoning`, or `thinking`) beside its `content`. The message parser read role and content only, so the reasoning
was dropped without a word and a reasoning SFT trained the bare answers (after Qwen3's empty think block),
teaching the model to stop thinking (https://github.com/hiyouga/LlamaFactory/issues/7027,
https://github.com/huggingface/trl/pull/6766). The field is written back inline as the `<think>` block Qwen3,
QwQ and DeepSeek-R1 write (Qwen3's template splits it out again exactly so), so it is trained and counted like
reasoning written in the text.
"""

from __future__ import annotations

from .formats import BadRecord, bad_type

REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking")


def reasoning_of(m: dict, i: int, where: str) -> str | None:
    """The reasoning message i carries in a field of its own, None when it has none (absent, null or empty:
    DeepSeek's API writes `reasoning_content: null` for an answer without thinking)."""
    given = {k: m[k] for k in REASONING_FIELDS if m.get(k) not in (None, "")}
    for k, v in given.items():
        if not isinstance(v, str):
            raise bad_type(f"message {i}'s {k}", v, where, "give the reasoning as a string")
    if len(set(given.values())) > 1:
        raise BadRecord("bad conversation", f"message {i} has two different reasonings ({', '.join(given)})", where,
                        "keep one reasoning field per message")
    return next(iter(given.values()), None)


def with_reasoning(m: dict, i: int, content, where: str):
    """`content` (a string or a list of parts) with message i's reasoning field written in front of it as
    `<think>\\n...\\n</think>\\n\\n`; unchanged when the message has none."""
    reasoning = reasoning_of(m, i, where)
    if reasoning is None:
        return content
    text = content if isinstance(content, str) else "".join(
        p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    if "</think>" in text:
        raise BadRecord("bad conversation", f"message {i} gives its reasoning twice: in a reasoning field and as a "
                        "<think> block in its text", where, "keep one: the field or the inline <think> block")
    block = f"<think>\n{reasoning.strip(chr(10))}\n</think>\n\n"
    if isinstance(content, str):
        return block + content.lstrip("\n")
    return [{"type": "text", "text": block}] + list(content)
