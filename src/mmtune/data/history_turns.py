"""Answers a chat template renders otherwise once a later user turn follows them.

Qwen3's (and Qwen3.5's, QwQ's) template drops an earlier answer's `<think>` block, and the empty
`<think>\\n\\n</think>\\n\\n` it writes before a last answer, from every assistant turn before the last user
query: a served model sees its earlier answers that way and writes each new answer, reasoning included,
after the generation prompt. So the conversation up to an earlier answer does not prefix the whole rendered
conversation, which the encoder's per-answer render relies on: every multi-turn record stopped `data
inspect`, the doctor and `train` with "renders a conversation differently from its own prefix ... report
this model to mmtune" (https://github.com/PrimeIntellect-ai/prime-rl/issues/1334).

Such an answer is left as context, not trained: trained as the history shows it (no reasoning, no think
block) it would teach the model to answer without thinking exactly where it generates its reasoning
(https://github.com/modelscope/ms-swift/issues/4939, https://github.com/hiyouga/LlamaFactory/issues/10336,
ms-swift's `--loss_scale last_round`). The doctor's MM195 says how many answers that leaves untrained and
how to train them (one record per answer). A template whose history render is not a prefix either is still
the encoder's error.
"""

from __future__ import annotations

from ..errors import DataError

HISTORY = "history"  # the span of an answer the template rewrites in history: rendered, not trained


def history_answer(encoder, tmessages: list[dict], i: int, full: str, record) -> str:
    """HISTORY when answer i renders otherwise in `full` only because a later turn follows it (the turns
    before it still prefix `full`); else the encoder's own "differently from its own prefix" error."""
    before = encoder.render(tmessages[:i]) if i else ""
    if full.startswith(before):
        return HISTORY
    raise DataError("the chat template renders a conversation differently from its own prefix",
                    where=record.where(),
                    fix="use a chat template whose rendering of a conversation starts with the rendering "
                        "of its first turns (report this model to mmtune)")


def rewritten_answers(encoder, tmessages: list[dict]) -> int:
    """How many assistant turns of `tmessages` the template renders otherwise once a later turn follows
    (0 where every answer's own render prefixes the whole conversation). For the doctor's MM195."""
    full = encoder.render(tmessages)
    last = len(tmessages) - 1
    return sum(1 for i, m in enumerate(tmessages)
               if m["role"] == "assistant" and i != last and not full.startswith(encoder.render(tmessages[: i + 1])))
