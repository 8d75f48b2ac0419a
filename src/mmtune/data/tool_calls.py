"""Tool-calling records, said as what they are.

Function-calling data comes in several layouts: OpenAI's (`tool_calls` on an assistant message, `tool`
messages with the results, a `tools` list of schemas beside `messages`), ShareGPT's as LLaMA-Factory writes
it (`function_call` / `observation` turns, glaive-function-calling-v2), Hermes' (`tool` turns, `<tool_call>`
text) and xLAM's (`query`, `tools`, `answers`). mmtune does not train tool calls: the chat template renders
the tool schemas and the call turns from fields (`tools=`, `tool_calls`) the encoder does not pass. Before
this, such records were refused for a wrong reason ("message 1 lacks a role or content (has content, role,
tool_calls)", "record has no field 'messages'") or -- a `tools` list beside plain messages -- trained without
the tools the data meant the model to see, silently. Now each is one `bad conversation` record naming the
tool-calling field, counted under data.on_bad_record like any other (a `tools` column named in LLaMA-Factory's
dataset_info.json is refused when the registry is read, data/dataset_info.py).
"""

from __future__ import annotations

from .formats import BadRecord

TOOL_FIELDS = ("tools", "functions")  # a row's tool schemas (OpenAI / xLAM; LLaMA-Factory's column)
TOOL_MESSAGE_KEYS = ("tool_calls", "function_call", "tool_call_id")  # OpenAI's (and its older functions API)
TOOL_ROLES = ("tool", "function", "function_call", "observation", "ipython")  # OpenAI, ShareGPT, Llama 3

FIX = ("tool-calling data is not supported: leave these records out (data.on_bad_record=skip counts them) or "
       "write each call and its result as plain user / assistant text")


def _given(value) -> bool:
    return value is not None and value != [] and value != "" and value != "[]"


def refuse_tool_calling(row, raw, where) -> None:
    """BadRecord when the row is tool-calling data: a `tools` / `functions` field with something in it, a
    message with tool-call keys, or a tool role. `raw` is the row's message list (None when it has none)."""
    if isinstance(row, dict):
        field = next((f for f in TOOL_FIELDS if _given(row.get(f))), None)
        if field is not None:
            raise BadRecord("bad conversation", f"record has a {field!r} field (tool schemas for function calling)",
                            where, FIX)
    for i, m in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(m, dict):
            continue
        key = next((k for k in TOOL_MESSAGE_KEYS if _given(m.get(k))), None)
        if key is not None:
            raise BadRecord("bad conversation", f"message {i} is a tool call ({key!r})", where, FIX)
        role = m.get("role", m.get("from"))
        if isinstance(role, str) and role in TOOL_ROLES:
            raise BadRecord("bad conversation", f"message {i} has the tool-calling role {role!r}", where, FIX)
