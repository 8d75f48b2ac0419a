"""data.format=messages: a conversation (`messages`, or ShareGPT's `conversations` with `from`/`value`), its
media in the parts or in top-level `images`/`videos`/`audios` lists that fill `<image>`-style placeholders, and
its tool calls (OpenAI's or ShareGPT's layout, a row-level `tools` list: data/tool_calls.py)."""

from __future__ import annotations

from ..foreign import check_part, check_text, turn_trained
from ..formats import (
    _PLACEHOLDER_KIND,
    _PLACEHOLDER_RE,
    PLACEHOLDERS,
    SHAREGPT_ROLES,
    BadRecord,
    _as_list,
    _checked_part,
    _get,
    _media_part,
    _shown,
    _split_placeholders,
    bad_type,
)
from ..reasoning_field import with_reasoning
from ..records import MEDIA_TYPES, Record
from ..tool_calls import CALL_ROLE, RESULT_ROLES, calls, result_message, row_tools

FIELDS = {"messages": ("messages", "conversations"), "images": ("images", "image"),
          "videos": ("videos", "video"), "audios": ("audios", "audio"), "id": ("id",)}


def to_records(row, fmt, columns, where, index, rid, resolve, templates=None) -> list[Record]:
    return messages_records(row, columns, where, rid, resolve)


def messages_records(row, columns, where, rid, resolve) -> list[Record]:
    tools = row_tools(row, where)
    raw = _get(row, "messages", "messages", columns, where)
    if not isinstance(raw, list) or not raw:
        raise BadRecord("missing field", "`messages` must be a non-empty list of {role, content}", where,
                        'write e.g. {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}')
    # Top-level media lists (LLaVA / ShareGPT style) fill `<image>`-style placeholders in the text, in order.
    queues: dict[str, list[dict]] = {}
    for kind, field in (("image", "images"), ("video", "videos"), ("audio", "audios")):
        val = _get(row, "messages", field, columns, where)
        queues[kind] = [_media_part(kind, v, resolve, where) for v in _as_list(val)] if val is not None else []
    n_given = {k: len(q) for k, q in queues.items()}
    messages = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise BadRecord("missing field", f"message {i} is not an object", where, "each message is {role, content}")
        role = m.get("role", m.get("from"))
        content = m.get("content", m.get("value"))
        if role is not None and not isinstance(role, str):
            raise bad_type(f"message {i}'s role", role, where, "role is one of user / assistant / system")
        if role in RESULT_ROLES:  # a tool's result: context for the next assistant turn
            messages.append(result_message(m, i, content, messages, where))
            continue
        tool_calls = calls(m, i, role, content, where) if isinstance(role, str) else None
        if role == CALL_ROLE:  # ShareGPT's call turn: an assistant turn whose text is the call alone
            role, content = "assistant", ""
        elif tool_calls is not None and content is None:  # OpenAI: a call turn's content is null
            content = ""
        if role is not None and role not in SHAREGPT_ROLES:
            raise BadRecord("bad conversation", f"message {i} has role {role!r}"[:200], where,
                            f"roles are {', '.join(sorted(set(SHAREGPT_ROLES)))}")
        role = SHAREGPT_ROLES.get(role) if role is not None else None
        if role is None or content is None:
            raise BadRecord("missing field", f"message {i} lacks a role or content (has {', '.join(sorted(map(str, m)))})",
                            where, "each message needs role (user/assistant/system) and content")
        trained = turn_trained(m, i, role, where)
        if role == "assistant":  # `reasoning_content` & co. beside the text: written inline (reasoning_field.py)
            content = with_reasoning(m, i, content, where)
        if isinstance(content, str):
            if role != "assistant":
                check_text(content, i, where)
            parts = _split_placeholders(content, queues) if any(n_given.values()) else [{"type": "text", "text": content}]
        elif isinstance(content, list):
            parts = []
            for p in content:
                if not isinstance(p, dict) or p.get("type") not in ("text",) + MEDIA_TYPES:
                    raise BadRecord("missing field", f"message {i} has a content part {_shown(p, 80)} that is not "
                                    "text/image/video/audio", where,
                                    'parts look like {"type": "text", "text": ...} or {"type": "image", "path": ...}')
                if p["type"] == "text":
                    text = p.get("text")
                    if not isinstance(text, str):  # a chat part's text is a string, by the format's definition
                        raise bad_type(f"message {i}'s text part", text, where, "give the text as a string")
                    if role != "assistant":
                        check_text(text, i, where)
                    parts.extend(_split_placeholders(text, queues) if any(n_given.values())
                                 else [{**p, "text": text}])
                elif (p.get("path"), p.get("url"), p.get("bytes"), p.get(p["type"])) == (None,) * 4 and queues[p["type"]]:
                    parts.append(queues[p["type"]].pop(0))  # {"type": "image"} with the file in the top-level list
                else:
                    check_part(p, i, where)
                    parts.append(_checked_part(p, resolve, where))
        else:
            raise bad_type(f"message {i}'s content", content, where, "content is a string or a list of parts")
        messages.append({"role": role, "content": parts} if trained else {"role": role, "content": parts, "train": False})
        if tool_calls is not None:
            messages[-1]["tool_calls"] = tool_calls
    first = next((m["role"] for m in messages if m["role"] != "system"), None)
    if first == "assistant":
        raise BadRecord("bad conversation", "an assistant turn comes before any user turn", where,
                        "start the conversation with the user's message (after an optional system message)")
    missing = [p["type"] for m in messages for p in m["content"] if p.get("_missing")]
    left = {k: len(q) for k, q in queues.items() if q}
    if missing or left:
        used = {k: n_given[k] - len(queues[k]) for k in n_given}
        detail = "; ".join(f"{n_given[k]} {k}(s) given, {used[k] + missing.count(k)} {PLACEHOLDERS[k]} placeholder(s) in the text"
                           for k in n_given if n_given[k] or k in missing)
        raise BadRecord("placeholder mismatch", f"media and placeholders do not match: {detail}", where,
                        "put exactly one <image>/<video>/<audio> in the text per file listed in images/videos/audios")
    if not any(n_given.values()):
        _no_tags_without_media(messages, row, columns, where)
    if not any(m["role"] == "assistant" for m in messages):
        raise BadRecord("no answer", "record has no assistant turn (nothing to learn or score)", where,
                        "end the conversation with an assistant message holding the answer, or set data.on_bad_record=skip")
    if not any(m["role"] == "assistant" and m.get("train", True) for m in messages):
        raise BadRecord("no answer", "every assistant turn is marked not to be trained (loss: false / weight: 0 / "
                        "training: false): nothing to learn", where, "let at least one answer be trained, or remove "
                        "the record")
    held = next((p["type"] for m in messages if m["role"] == "assistant" for p in m["content"] if p["type"] in MEDIA_TYPES), None)
    if held:  # trained as input beside the answer, dropped from eval's prompt: no model here writes media
        raise BadRecord("bad conversation", f"an assistant turn holds a {held}: the models read media, they do not "
                        "write it", where, f"move the {held} (or its <{held}> tag) into the user turn it answers")
    if messages[-1]["role"] in ("user", "tool"):  # half-written: eval's prompt would drop the question unseen
        turn = "a user turn" if messages[-1]["role"] == "user" else "a tool result"
        raise BadRecord("bad conversation", f"the conversation ends with {turn} ({len(messages)} turns) that no "
                        "assistant turn answers", where, f"end the conversation with the assistant's answer, or remove "
                        f"the unanswered {turn[2:]} (evaluation prompts with everything before the last answer)")
    return [Record(id=rid, source=where, messages=messages, tools=tools)]


def _no_tags_without_media(messages: list[dict], row: dict, columns: dict[str, str], where: str) -> None:
    """`<image>` tags in a record that lists no media: its media field is misspelt (`imgs`), empty, or named
    by a wrong data.columns / dataset_info `columns` entry. Trained as is, the tags would be literal text
    and the record text-only: refused, naming the fields the row does have."""
    tags = {}
    for m in messages:
        for p in m["content"]:
            if p.get("type") == "text":
                for t in _PLACEHOLDER_RE.findall(p["text"]):
                    tags[t] = tags.get(t, 0) + 1
    if not tags:
        return
    kinds = [_PLACEHOLDER_KIND[t] for t in tags]
    named = ", ".join(f"{(columns.get(k + 's') or FIELDS[k + 's'][0])!r}" for k in kinds)
    have = ", ".join(sorted(map(str, row))) or "(none)"
    raise BadRecord("placeholder mismatch", "the text has " + ", ".join(f"{n} {t} tag(s)" for t, n in tags.items())
                    + f" but the record lists no {'/'.join(k + 's' for k in kinds)} (looked for {named})", where,
                    f"the record's fields are: {have}. Name the media field with data.columns (e.g. "
                    f"data.columns.images=<field>; a dataset_info entry: columns.images), or remove the tags")
