"""The special strings a record's text must not hold (the encoder's "special token in text"), and what to say
when one is there. Split from encode.py: which strings, and the fix each kind of string needs.

A turn token (`<|im_end|>`, bos / eos / pad) in a text is data that would be read as the control token itself:
the fix is to remove or escape it. A media wrapper mark (Qwen2-Audio's `<|audio_bos|>`, Qwen2-VL's
`<|vision_start|>`) is what a user copies from the model card's own prompt format ("Audio 1:
<|audio_bos|><|AUDIO|><|audio_eos|>"): escaping it keeps a meaningless string in the prompt, and what was meant is
the media tag, around which mmtune writes the marks itself.
"""

from __future__ import annotations

import re

from .formats import PLACEHOLDERS, BadRecord


def turn_tokens(encoder) -> tuple[re.Pattern | None, dict[str, str]]:
    """(the pattern of the special strings that give a conversation its turns or wrap its media, {wrapper mark:
    media kind}): those the chat template writes around a plain user/assistant exchange, plus bos/eos/pad, and
    those it writes around one media item of each kind the model takes. Other special tokens (Qwen2-VL's
    <|box_start|> grounding marks) are data some sets write on purpose; the placeholders are checked as media
    (failure mode 16)."""
    tok = encoder.tokenizer
    words = {t for t in (tok.bos_token, tok.eos_token, tok.pad_token) if t}
    marks: dict[str, str] = {}
    plain = None
    # Once per encoder, straight through the processor (not per record, not counted as one): a plain exchange,
    # then one per media kind, whose wrapper marks in a user's text would open a media span with no media in it.
    for kind in [None, *sorted(encoder.modalities - {"text"})]:
        user = "q" if kind is None else [{"type": kind}, {"type": "text", "text": "q"}]
        try:
            sample = encoder.processor.apply_chat_template(encoder._template_messages(
                [{"role": "user", "content": user}, {"role": "assistant", "content": "a"}]), tokenize=False)
        except Exception:  # noqa: BLE001 - a template that cannot render this is reported by the encode itself
            continue
        found = {t for t in encoder.special_strings if t in sample}
        if kind is None:
            plain = found
        else:
            marks.update({t: kind for t in found - (plain or set()) - words if t not in marks})
        words |= found
    words -= {v for v in encoder.placeholder.values() if v}
    marks = {t: k for t, k in marks.items() if t in words}
    words = sorted(words, key=len, reverse=True)
    return (re.compile("|".join(map(re.escape, words))) if words else None), marks


def special_token_error(hit: str, role, where: str, marks: dict[str, str], placeholder: dict) -> BadRecord:
    """The record's error for special string `hit` in its `role` text (marks and placeholders: turn_tokens')."""
    kind = marks.get(hit)
    if kind is None:
        return BadRecord("special token in text", f"the {role} text holds {hit!r}, a control token of this tokenizer: "
                         "it would be read as the token itself (a turn ending inside the text), not as text", where,
                         f"remove or escape {hit!r} in the record (e.g. write it with a space), or set "
                         "data.on_bad_record=skip to leave such records out (they are counted)")
    model_ph = placeholder.get(kind)
    return BadRecord("special token in text", f"the {role} text holds {hit!r}, the mark this model's template writes "
                     f"around each {kind}: written by hand it starts the model's {kind} span with no {kind} in it", where,
                     f"write {PLACEHOLDERS[kind]} where the {kind} goes and list its file in the record's {kind}s "
                     f"(mmtune writes {hit!r}" + (f", {model_ph!r}" if model_ph else "") + " and the rest around "
                     f"each {kind} itself): remove the model's own marks from the text")
