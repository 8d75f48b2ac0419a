"""An answer the chat template writes otherwise than the record does: where it is, or why it cannot be trained.

The encoder finds each answer by its text in the rendered conversation. Reasoning templates rewrite an
answer's `<think>` block: Qwen3's (Qwen3-VL-Thinking's, QwQ's) splits it out and writes it back as
`<think>\\n{reasoning}\\n</think>\\n\\n{answer}`, so data written `<think></think>answer`
(https://github.com/modelscope/ms-swift/issues/4810) or `<think>\\n  thinking  \\n</think>\\n answer`
(https://github.com/QwenLM/Qwen3/issues/1438) is rendered with other whitespace; DeepSeek-R1-Distill's drops
the reasoning of every answer, the last included (https://github.com/deepseek-ai/DeepSeek-R1/issues/633). Both
stopped the record with "assistant turn N has no answer text the template renders ... give every assistant turn
a non-empty text answer", for answers that are not empty.

Where the rendering differs from the record's answer in whitespace alone, the answer is trained as the template
writes it: that is the layout the model was trained on and reads its earlier answers in. Where the template
drops the reasoning, training what it renders would silently teach the bare answer; the record is refused
with that reason and the fix.
"""

from __future__ import annotations

from .formats import BadRecord


def respaced_span(region: str, answer: str) -> tuple[int, int] | None:
    """[start, end) in `region` (the text after the answer's generation prompt) of `answer` written with other
    whitespace, or None where the text differs otherwise."""
    k, n = 0, len(region)
    while k < n and region[k].isspace():
        k += 1
    start = k
    for c in answer:
        if c.isspace():
            continue
        while k < n and region[k].isspace():
            k += 1
        if k == n or region[k] != c:
            return None
        k += 1
    return (start, k) if k > start else None


def rewritten_answer(encoder, tmessages: list[dict], i: int, upto: str, answer: str, record) -> tuple[int, int] | None:
    """[start, end) in `upto` of answer i as the template re-spaces it; None where the text differs otherwise
    or its generation prompt does not lead to it (the encoder's "no answer text"); a BadRecord where the template
    drops its reasoning."""
    if not answer:
        return None
    prompt = encoder.render(tmessages[:i], add_generation_prompt=True)
    if upto.startswith(prompt):
        base = len(prompt)
        span = respaced_span(upto[base:], answer)
        if span is not None:
            return base + span[0], base + span[1]
    else:  # a generation prompt that opens the reasoning itself (DeepSeek-R1's `<think>\n`): the turn as rendered
        base = len(encoder.render(tmessages[:i])) if i else 0
    region = upto[base:]
    if "</think>" in answer:
        final = answer.rsplit("</think>", 1)[1].strip()
        reasoning = answer.rsplit("</think>", 1)[0].split("<think>")[-1].strip()
        if final and not reasoning and final in region:  # an empty block the template leaves out: nothing is lost
            start = base + region.rindex(final)
            return start, start + len(final)
        if final and final in region and reasoning not in region:
            raise BadRecord("reasoning dropped", f"the chat template drops assistant turn {i}'s <think> reasoning (or part "
                            f"of it) and renders {region.strip()[:80]!r}: trained so, the reasoning is lost",
                            record.where(), "train with a chat template that keeps the last answer's reasoning: in the "
                            "model folder's chat_template.jinja (or tokenizer_config.json) remove the `{% if '</think>' "
                            "in content %}{% set content = content.split('</think>')[-1] %}{% endif %}` step, as TRL's "
                            "deepseek_r1_distill_training.jinja does, or drop the reasoning from the data")
    return None
