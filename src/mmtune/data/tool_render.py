"""Tool-calling records through the chat template: the tools passed as `tools=`, the calls as `tool_calls`, and
the text each call turn is trained as, taken from the template's own renders.

Why from the renders: the encoder finds each answer's span by searching its text in the rendered conversation.
A call turn has no text of its own to search for: what the model must learn to write is what the template
writes for it (Qwen2.5: `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`, after the turn's text if
it has some). That is the conversation up to the turn minus the prompt with its generation prompt, minus the
end of turn the template writes after every answer (which the encoder trains after the call as after any answer).
No template is re-implemented here, so every template that renders tools is read the same way.

A template that cannot render tools (its source never mentions `tool_calls` / `tools`: the record's calls and
schemas would vanish from the text, and the model would learn empty turns) refuses such records as `tools not
rendered`, naming what to do.
"""

from __future__ import annotations

from .formats import BadRecord

MESSAGE_KEYS = ("tool_calls", "name", "tool_call_id")  # what a template reads beside role / content


class Conversation(list):
    """Template messages with the row's tool schemas. Slicing keeps them, so every render of a prefix (the
    encoder's per-answer renders, history_turns, answer_tail) passes the same `tools=` as the whole."""

    tools: list[dict] | None = None

    def __getitem__(self, i):
        got = super().__getitem__(i)
        if isinstance(i, slice):
            got = Conversation(got)
            got.tools = self.tools
        return got


def template_message(m: dict, content) -> dict:
    """A record message as the chat template reads it: role, content, and its tool keys when it has them."""
    out = {"role": m["role"], "content": content}
    out.update({k: m[k] for k in MESSAGE_KEYS if m.get(k)})
    return out


def tool_texts(record) -> list[tuple[str, str]]:
    """(what, text) of the record's calls and schemas as the template writes them (JSON), for the encoder's
    special-token check: a `<|im_end|>` inside an argument would end the turn mid-call."""
    import json

    out = [("tool call", json.dumps(m["tool_calls"], ensure_ascii=False)) for m in record.messages if m.get("tool_calls")]
    return out + ([("tool schema", json.dumps(record.tools, ensure_ascii=False))] if getattr(record, "tools", None) else [])


def template_source(encoder) -> str:
    """The chat template text(s) of the processor / tokenizer (a dict of named templates: all of them)."""
    src = getattr(encoder.processor, "chat_template", None) or getattr(encoder.tokenizer, "chat_template", None) or ""
    return " ".join(map(str, src.values())) if isinstance(src, dict) else str(src)


def with_tools(encoder, out: list[dict], record) -> list[dict]:
    """`out` (template messages) carrying `record`'s tools; BadRecord when the record has tool schemas, calls or
    results and this model's template cannot render them."""
    tools = getattr(record, "tools", None) if record is not None else None
    needs = (["tools"] if tools else []) + (["tool_calls"] if any(m.get("tool_calls") or m["role"] == "tool"
                                                                    for m in out) else [])
    if not needs:
        return out
    source = template_source(encoder)
    missing = [k for k in needs if k not in source]
    if missing:
        what = " or ".join({"tools": "tool schemas", "tool_calls": "tool calls and their results"}[k] for k in missing)
        raise BadRecord("tools not rendered", f"this model's chat template cannot render {what} (its source never "
                        f"mentions {' / '.join(missing)}): the record would be trained without them",
                        record.where() if record is not None else "",
                        "use a model whose chat template renders tools (Qwen2.5 / Qwen3 / Llama 3.1 instruct), or write "
                        "each call and its result as plain user / assistant text; data.on_bad_record=skip leaves such "
                        "records out (they are counted)")
    conv = Conversation(out)
    conv.tools = tools
    return conv


def _without_end(encoder, turn: str) -> str:
    """`turn` (a rendered assistant turn) without the end of turn the template writes after every answer."""
    from .answer_tail import learn_tail

    if encoder._answer_tail is False:
        encoder._answer_tail = learn_tail(encoder)
    tail = encoder._answer_tail
    if tail and turn.endswith(tail):
        return turn[: -len(tail)]
    t = turn.rstrip()
    end = next((s for s in encoder.special_strings if t.endswith(s)), None)  # longest first
    return t[: -len(end)] if end else t


def _preamble(encoder, tmessages: list[dict], i: int, prompt: str) -> str:
    """What the template writes between the generation prompt and any answer of turn `i`'s position (Qwen3's
    empty `<think>\n\n</think>\n\n` before a last answer): context, as it is before a plain answer, where the
    answer is searched for after it. Read from the same turn rendered with no text and no call."""
    empty = tmessages[:i]
    content = tmessages[i]["content"]
    empty.append({"role": "assistant", "content": "" if isinstance(content, str) else []})
    try:
        rendered = encoder.render(empty)
    except Exception:  # noqa: BLE001 - a template that refuses an empty turn: nothing to take away
        return ""
    return _without_end(encoder, rendered[len(prompt):]) if rendered.startswith(prompt) else ""


def call_text(encoder, tmessages: list[dict], i: int, upto: str, where: str = "") -> str:
    """The text the template writes for assistant turn `i` (a call turn) in `upto`, the rendering of the
    conversation up to and including it: its text and calls, stripped, without the header or end of turn."""
    prompt = encoder.render(tmessages[:i], add_generation_prompt=True)
    if not upto.startswith(prompt):
        raise BadRecord("tools not rendered", f"the chat template writes tool-call turn {i} otherwise than after its "
                        "generation prompt, so the call's text cannot be told from the prompt", where,
                        "use a model whose template renders a call turn after its generation prompt, or report the "
                        "model to mmtune")
    turn = _without_end(encoder, upto[len(prompt):])
    pre = _preamble(encoder, tmessages, i, prompt)
    turn = (turn[len(pre):] if pre and turn.startswith(pre) else turn).strip()
    lost = [c["function"]["name"] for c in tmessages[i]["tool_calls"] if c["function"]["name"] not in turn]
    if lost:
        raise BadRecord("tools not rendered", f"the chat template does not write the call to {lost[0]!r} of turn {i}",
                        where, "use a model whose chat template renders tool calls (Qwen2.5 / Qwen3 / Llama 3.1 "
                        "instruct), or write the call as plain assistant text")
    return turn


def reference(encoder, record) -> str | None:
    """Evaluation's reference when the record's last assistant turn calls tools: the call as the template writes
    it (what exact match compares the generated text with); None for any other record."""
    from .records import last_assistant_index

    i = last_assistant_index(record.messages)
    if i is None or not record.messages[i].get("tool_calls"):
        return None
    tmessages = encoder._template_messages(record.messages[: i + 1], record)
    return call_text(encoder, tmessages, len(tmessages) - 1, encoder.render(tmessages), record.where())
