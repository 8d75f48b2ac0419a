"""Where a record's last answer starts, from its one rendering: the text the chat template writes after the last
answer of a conversation (Qwen's `<|im_end|>\\n`), learned once per encoder.

Why: `Encoder._answer_spans` found each answer after a second rendering, of the prompt up to it with the
generation prompt. For the last answer (a one-answer record's only one) that second rendering is not needed
where the template renders a user/assistant exchange as exactly its generation prompt + the answer + a fixed
tail: a record whose rendering ends with its answer + that tail has its answer right there. Learned from a
conversation of sentinel strings; a template that writes anything between the generation prompt and the
answer (a reasoning block), changes the answer's text, or fails to render gets no shortcut, and a record that
does not end as answer + tail (an answer the template trims, a tail that depends on the conversation) is
found the old way, so the spans are the same as with the second rendering.
"""

from __future__ import annotations

QUESTION, ANSWER = "mmtune-sentinel-question-7f3a", "mmtune-sentinel-answer-7f3a"


def learn_tail(encoder) -> str | None:
    """The text after the answer in the template's rendering of a user/assistant exchange, or None where the
    rendering is not generation prompt + answer + tail."""
    tmessages = encoder._template_messages([{"role": "user", "content": QUESTION},
                                            {"role": "assistant", "content": ANSWER}])
    try:
        full = encoder.render(tmessages)
        prompt = encoder.render(tmessages[:-1], add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - no shortcut: records are encoded with the second rendering, which reports
        return None
    if not full.startswith(prompt + ANSWER) or full.count(ANSWER) != 1:
        return None
    return full[len(prompt) + len(ANSWER):]


def last_answer_start(encoder, full: str, answer: str) -> int:
    """Where `answer` (the last turn's, stripped) starts in `full`, the record's rendering; -1 where the
    shortcut does not apply (then the prompt is rendered to find it)."""
    if encoder._answer_tail is False:
        encoder._answer_tail = learn_tail(encoder)
    tail = encoder._answer_tail
    if tail is None or not answer or not full.endswith(answer + tail):
        return -1
    return len(full) - len(tail) - len(answer)
