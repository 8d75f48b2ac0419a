"""Rendering through the chat template, with the one template refusal a record or config can cause knowingly:
a system turn under a template that has no system role (Gemma's "System role not supported", raised from the
template by `raise_exception`). Without this the refusal reached the record boundary (formats.isolated) as an
"unreadable record" whose fix was to report it to mmtune or skip it, which skips every record with a system turn,
or every record of the run when `data.system_prompt` put the system turn there. Now it is said as what it is:
the config's error for data.system_prompt, each record's own "system role not supported" otherwise.
"""

from __future__ import annotations

from ..errors import ConfigError, MMTuneError
from .formats import BadRecord

SYSTEM_ROLE = "system role not supported"  # the reason such records are counted under (data.on_bad_record=skip)
MERGE = "merge the system text into the first user turn, or use a model whose chat template has a system role"


def _text(content) -> str:
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content if isinstance(p, dict))


def render(encoder, tmessages: list[dict], add_generation_prompt: bool = False, where: str = "") -> str:
    """`processor.apply_chat_template(tmessages, tokenize=False)`, with `tools=` where the messages carry a
    record's tool schemas (tool_render.Conversation); a template that refuses the conversation only because of
    its system turn raises ConfigError (the turn is data.system_prompt's) or BadRecord."""
    tools = getattr(tmessages, "tools", None)
    kwargs = {"tools": tools} if tools else {}  # passed only when given: a template without tools renders as before

    def apply(messages, **kw):
        return encoder.processor.apply_chat_template(messages, **kw, **kwargs)

    try:
        return apply(tmessages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except MMTuneError:
        raise
    except Exception as e:
        if not tmessages or tmessages[0]["role"] != "system":
            raise
        try:  # the same conversation without its system turn: does the template take it?
            apply(tmessages[1:], tokenize=False, add_generation_prompt=add_generation_prompt)
        except Exception:  # noqa: BLE001 - refused for another reason too: the original error is the record's
            raise e from None
        said = f"the chat template of this model refuses a system turn ({type(e).__name__}: {str(e)[:120]})"
        if encoder.system_prompt and _text(tmessages[0]["content"]) == encoder.system_prompt:
            raise ConfigError(f"{said}, and data.system_prompt puts one in every record", where="data.system_prompt",
                              fix="remove data.system_prompt and write the instruction into the first user turn, or "
                                  "use a model whose chat template has a system role") from None
        # (`where` is filled in by the record's boundary, formats.isolated)
        raise BadRecord(SYSTEM_ROLE, f"{said}; this record has one", where,
                        f"{MERGE}; or set data.on_bad_record=skip to leave such records out (they are counted)") from None
