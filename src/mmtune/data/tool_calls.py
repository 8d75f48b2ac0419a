"""Tool-calling (function-calling) records, read into the one record shape.

Two layouts become the same record:
- OpenAI's: `messages` whose assistant turns carry `tool_calls` ([{type: function, function: {name, arguments}}],
  `arguments` a JSON string or an object; the older `function_call: {name, arguments}` too), `tool` messages with
  the results, and a row-level `tools` list of schemas (or a JSON string of one, as LLaMA-Factory stores it);
- ShareGPT's as LLaMA-Factory writes it (glaive-function-calling-v2): `conversations` with `function_call` turns
  (value: JSON {"name", "arguments"}, or a list of them) and `observation` turns (value: the result), plus a
  `tools` column (a JSON string).
A call becomes `{"type": "function", "function": {"name", "arguments": <object>}}` (the object, since Qwen2.5's
template json-dumps `arguments` as it is: a JSON string would be written twice-quoted), an assistant turn that
calls tools carries them under `tool_calls`, a result is a `tool` turn, and each tool schema has OpenAI's shape
({"type": "function", "function": schema}, as LLaMA-Factory wraps glaive's bare schemas), so both layouts render
to the same tokens. The chat template renders them (data/tool_render.py); what is trained is each assistant turn
as the template renders it, calls included, never a tool result or the schemas.

What cannot be read this way is one BadRecord each (`bad tool call`, counted under data.on_bad_record): JSON
that does not parse, a call without a name, a result with no call before it, xLAM's query / tools / answers rows.
"""

from __future__ import annotations

import json

from .formats import SHAREGPT_ROLES, BadRecord

TOOL_FIELDS = ("tools", "functions")  # a row's tool schemas (OpenAI / xLAM; LLaMA-Factory's column)
# The roles a tool's result comes under: OpenAI's `tool` (and `function` of its older functions API),
# ShareGPT's `observation`, Llama 3's `ipython`.
RESULT_ROLES = ("tool", "function", "observation", "ipython")
CALL_ROLE = "function_call"  # ShareGPT's assistant turn that calls a tool
LAYOUTS = ('write calls as OpenAI does ({"role": "assistant", "tool_calls": [{"type": "function", "function": '
           '{"name": ..., "arguments": {...}}}]} then {"role": "tool", "content": <result>}) or as LLaMA-Factory\'s '
           'ShareGPT (a function_call turn whose value is {"name": ..., "arguments": {...}}, then an observation turn)')


def _given(value) -> bool:
    return value is not None and value != [] and value != "" and value != "[]"


def _json(value, what: str, where: str):
    """`value` parsed when it is a JSON string (LLaMA-Factory stores tools and calls as strings), else itself."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise BadRecord("bad tool call", f"{what} is not valid JSON ({e.msg} at character {e.pos}): {value[:80]!r}", where,
                        f"write {what} as a JSON object (or a string holding valid JSON)") from None
    except RecursionError:  # json's C scanner recurses per level: thousands of open brackets exceed the stack
        raise BadRecord("bad tool call", f"{what} is JSON nested too deeply to read: {value[:80]!r}", where,
                        f"write {what} as a JSON object (or a string holding valid JSON)") from None


def row_tools(row, where: str) -> list[dict] | None:
    """The row's tool schemas in OpenAI's shape, or None when it has none. A `tools` / `functions` list beside
    no conversation (xLAM's query / tools / answers) is refused: there is no turn to train."""
    if not isinstance(row, dict):
        return None
    field = next((f for f in TOOL_FIELDS if _given(row.get(f))), None)
    if field is None:
        return None
    if row.get("messages") is None and row.get("conversations") is None:
        raise BadRecord("bad tool call", f"record has a {field!r} field but no messages / conversations (xLAM's query / "
                        "tools / answers layout is not read)", where, f"write each row as a conversation: {LAYOUTS}")
    tools = _json(row[field], f"the {field!r} field", where)
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise BadRecord("bad tool call", f"the {field!r} field is a {type(tools).__name__}, not a list of tool schemas", where,
                        'give a list of {"type": "function", "function": {"name", "description", "parameters"}}')
    out = []
    for k, t in enumerate(tools):
        wrapped = t if t.get("type") == "function" and isinstance(t.get("function"), dict) else {"type": "function",
                                                                                                  "function": t}
        if not isinstance(wrapped["function"].get("name"), str) or not wrapped["function"]["name"]:
            raise BadRecord("bad tool call", f"tool {k} of {field!r} has no name", where,
                            'each tool schema names its function: {"name": ..., "parameters": {...}}')
        out.append(wrapped)
    return out or None


def _call(c, what: str, where: str) -> dict:
    c = _json(c, what, where)
    if isinstance(c, dict) and isinstance(c.get("function"), dict):  # OpenAI: {type, id?, function: {...}}
        fn, extra = c["function"], {"id": c["id"]} if c.get("id") is not None else {}
    else:  # ShareGPT / OpenAI's older function_call: {name, arguments}
        fn, extra = c, {}
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        shown = json.dumps(c)[:120] if isinstance(c, (dict, list)) else repr(c)[:120]
        raise BadRecord("bad tool call", f"{what} has no function name: {shown}", where, LAYOUTS)
    args = fn.get("arguments", fn.get("parameters"))
    args = {} if args in (None, "") else _json(args, f"{what}'s arguments", where)
    if not isinstance(args, dict):
        raise BadRecord("bad tool call", f"{what}'s arguments are a {type(args).__name__}, not an object", where,
                        'give the arguments as a JSON object: {"city": "Paris"}')
    return {"type": "function", **extra, "function": {"name": fn["name"], "arguments": args}}


def calls(m: dict, i: int, role: str, content, where: str) -> list[dict] | None:
    """The tool calls message `i` makes, normalised, or None when it makes none. `role` is the message's own
    (ShareGPT `function_call` before mapping)."""
    if role == CALL_ROLE:
        got = _json(content, f"message {i}'s function_call value", where)
        got = got if isinstance(got, list) else [got]
        return [_call(c, f"message {i}'s call {k}", where) for k, c in enumerate(got)]
    given = m.get("tool_calls") if _given(m.get("tool_calls")) else (
        [m["function_call"]] if _given(m.get("function_call")) else None)
    if given is None:
        return None
    if SHAREGPT_ROLES.get(role) != "assistant":  # (ShareGPT's `gpt` is an assistant turn too)
        raise BadRecord("bad tool call", f"message {i} ({role}) carries tool calls; only an assistant turn calls tools", where,
                        LAYOUTS)
    given = _json(given, f"message {i}'s tool_calls", where)
    if not isinstance(given, list):
        raise BadRecord("bad tool call", f"message {i}'s tool_calls is a {type(given).__name__}, not a list", where, LAYOUTS)
    return [_call(c, f"message {i}'s call {k}", where) for k, c in enumerate(given)]


def result_message(m: dict, i: int, content, previous: list[dict], where: str) -> dict:
    """A tool's result as a `tool` turn; refused when no assistant call comes before it (among the results of
    one call turn, each answers that turn)."""
    before = next((p for p in reversed(previous) if p["role"] != "tool"), None)
    if before is None or not before.get("tool_calls"):
        raise BadRecord("bad tool call", f"message {i} is a tool result with no tool call before it", where,
                        f"put the assistant turn that calls the tool right before its result: {LAYOUTS}")
    if content is None:
        raise BadRecord("bad tool call", f"message {i} is a tool result with no content", where,
                        "give the tool's result as the message's content (value in ShareGPT)")
    if not isinstance(content, str):  # a result given as JSON: the template writes text
        content = json.dumps(content, ensure_ascii=False)
    out = {"role": "tool", "content": [{"type": "text", "text": content}]}
    for key in ("name", "tool_call_id"):
        if isinstance(m.get(key), str):
            out[key] = m[key]
    return out


def is_tool_record(record) -> bool:
    """A record that needs a template rendering tools: schemas, a call, or a result."""
    return bool(getattr(record, "tools", None)) or any(
        m.get("tool_calls") or m.get("role") == "tool" for m in record.messages)
