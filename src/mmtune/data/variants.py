"""The shapes other tools' data comes in, read as they mean it (or refused with the reason).

Applied around `row_records.row_to_records`, so every reader (training, doctor, inspect) sees the same:

- alpaca (LLaMA-Factory): `instruction` + `input` -> the user turn, `output` -> the answer, optional
  `system`, `history` ([[question, answer], ...]) and `images`/`videos`/`audios`. `data.format=alpaca`,
  or recognised under the default `messages` format when a row has `instruction` and `output` but no
  `messages`.
- ms-swift `query`/`response` (+ `history`, `system`): recognised the same way.
- TRL's `prompt`/`completion` (text or messages, + `images`): the prompt's turns, then the completion's;
  only the completion is trained (TRL's completion_only_loss).
- media lists without placeholders: a row with `images`/`videos`/`audios` and no `<image>`-style tag
  anywhere in its text gets its media at the start of the first user turn, as ms-swift places them.
- OpenAI-style content parts: `{"type": "image_url", "image_url": {"url": ...}}` (a path, `file://`
  or a base64 `data:` URL), `{"type": "input_audio", "input_audio": {"data": b64, "format": "wav"}}`,
  `video_url`, and `input_text`/`output_text`.
- a top-level `system` field becomes the conversation's system turn in every format (it was dropped).
- `<image>` tags inside a QA format's question (alpaca through `vqa`) mark where the image goes, and
  are not trained on as literal text; a count that does not match the images is refused.
"""

from __future__ import annotations

import base64
import binascii
import json

from .formats import (
    _PLACEHOLDER_RE,
    FORMAT_FIELDS,
    PLACEHOLDERS,
    BadRecord,
    _split_placeholders,
    text_value,
)
from .records import MEDIA_TYPES, Record, content_parts, part_text

MEDIA_LISTS = {"image": "images", "video": "videos", "audio": "audios"}
QA_FORMATS = ("vqa", "chartqa", "infovqa", "ocrvqa")


def _field(row: dict, fmt: str, name: str, columns: dict[str, str]):
    for n in ((columns[name],) if name in columns else FORMAT_FIELDS[fmt][name]):
        if n in row and row[n] is not None:
            return row[n]
    return None


# ------------------------------------------------------------------------------- rows -> messages rows
def _pairs(history, where: str) -> list[tuple[str, str]]:
    if history in (None, ""):
        return []
    ok = isinstance(history, (list, tuple)) and all(isinstance(h, (list, tuple)) and len(h) == 2 for h in history)
    if not ok:
        raise BadRecord("missing field", "`history` is not a list of [question, answer] pairs", where,
                        'write history as [["earlier question", "earlier answer"], ...]')
    return [(text_value(q, "history question", where), text_value(a, "history answer", where)) for q, a in history]


def _conversation_row(row: dict, system, history, prompt: str, answer, media: dict, where: str) -> dict:
    # A list or an object is no answer: str() of it would train the model on its Python repr ("['a', 'b']").
    answer = text_value(answer, "answer", where) if answer is not None else None
    if answer is None or answer.strip() == "":
        raise BadRecord("no answer", "record has an empty answer", where,
                        "give every training/eval record a non-empty answer, or set data.on_bad_record=skip")
    messages = [{"role": "system", "content": text_value(system, "system", where)}] if system else []
    for q, a in _pairs(history, where):
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    messages += [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
    out = {"messages": messages, **{k: v for k, v in media.items() if v is not None}}
    if row.get("id") is not None:
        out["id"] = row["id"]
    return out


def _listed(v) -> list:
    return [] if v in (None, "") else list(v) if isinstance(v, (list, tuple)) else [v]


def alpaca_row(row: dict, columns: dict[str, str], where: str) -> dict:
    def get(name):
        return _field(row, "alpaca", name, columns)

    instruction, extra = get("instruction"), get("input")
    if instruction is None:
        have = ", ".join(sorted(map(str, row))) or "(none)"
        raise BadRecord("missing field", "record has no 'instruction' (format 'alpaca' needs it)", where,
                        f"the record's fields are: {have}. Map yours with data.columns.instruction=<field>")
    # LLaMA-Factory joins instruction and input with a newline.
    prompt = text_value(instruction, "instruction", where) + (
        "\n" + text_value(extra, "input", where) if extra not in (None, "") else "")
    media = {lst: get(lst) for lst in MEDIA_LISTS.values()}
    history = get("history")
    if not _has_tag(prompt + json.dumps(history or [])):
        # Untagged media belong to the instruction they come with (not to an earlier turn of history).
        prompt = "".join(PLACEHOLDERS[k] * len(_listed(media[lst])) for k, lst in MEDIA_LISTS.items()) + prompt
    return _conversation_row(row, get("system"), history, prompt, get("output"), media, where)


def query_response_row(row: dict, where: str) -> dict:
    media = {lst: row.get(lst) for lst in MEDIA_LISTS.values()}
    return _conversation_row(row, row.get("system"), row.get("history"), text_value(row["query"], "query", where),
                             row.get("response"), media, where)


def prompt_completion_row(row: dict, where: str) -> dict:
    """TRL's prompt-completion layout: `prompt` (text, or the messages before the answer) then `completion`
    (text, or the assistant messages). Only the completion is trained, as TRL's completion_only_loss does:
    an assistant turn inside the prompt is kept as context with `loss: false` (data/foreign.py)."""
    def turns(v, role: str, name: str) -> list:
        if isinstance(v, str):
            return [{"role": role, "content": v}]
        if isinstance(v, list) and all(isinstance(m, dict) for m in v):
            return list(v)
        raise BadRecord("bad type", f"`{name}` is a {type(v).__name__}: TRL's {name} is text or a list of messages",
                        where, f'write "{name}" as a string or [{{"role": ..., "content": ...}}, ...]')

    prompt = [{**m, "loss": False} if m.get("role", m.get("from")) in ("assistant", "gpt") and "loss" not in m else m
              for m in turns(row["prompt"], "user", "prompt")]
    out = {k: v for k, v in row.items() if k not in ("prompt", "completion")}
    return {**out, "messages": prompt + turns(row["completion"], "assistant", "completion")}


# ------------------------------------------------------------------------------- content parts
def _openai_part(p: dict, where: str) -> dict:
    """An OpenAI-style content part as ours ({"type": kind, "path" | "bytes"}); other parts unchanged."""
    t = p.get("type")
    if not isinstance(t, str):  # a list or a dict as a type: the format's own check names the part
        return p
    if t in ("input_text", "output_text"):
        return {"type": "text", "text": p.get("text", "")}
    if t == "input_audio":
        spec = p.get("input_audio") or {}
        if not spec.get("data"):
            raise BadRecord("bad media", "an input_audio part without data", where,
                            'write {"type": "input_audio", "input_audio": {"data": BASE64, "format": "wav"}}')
        try:
            data = base64.b64decode(spec["data"], validate=True)
        except (binascii.Error, ValueError):
            raise BadRecord("bad media", "input_audio holds invalid base64", where, "re-encode the file") from None
        return {"type": "audio", "bytes": data, "name": f"input_audio.{spec.get('format') or 'wav'}"}
    kind = {"image_url": "image", "video_url": "video", "audio_url": "audio"}.get(t)
    if kind is None:
        return p
    spec = p.get(t)
    url = spec.get("url") if isinstance(spec, dict) else spec
    if not url:
        raise BadRecord("bad media", f"a {t} part without a url", where, f'write {{"type": "{t}", "{t}": {{"url": "file.png"}}}}')
    # as a plain part's url: formats._checked_part reads a data: URL's bytes and a file:// URL's path
    return {"type": kind, "url": str(url)}


def _has_tag(text: str) -> bool:
    return _PLACEHOLDER_RE.search(text) is not None  # one pass over the text, not one per tag (per record at load)


def _normalise_messages(row: dict, columns: dict[str, str], where: str) -> dict:
    key = next((k for k in ((columns["messages"],) if "messages" in columns else FORMAT_FIELDS["messages"]["messages"])
                if isinstance(row.get(k), list)), None)
    if key is None:
        return row
    messages, changed = [], False
    for m in row[key]:
        if isinstance(m, dict) and isinstance(m.get("content"), list):
            parts = [_openai_part(p, where) if isinstance(p, dict) else p for p in m["content"]]
            changed |= parts != m["content"]
            m = {**m, "content": parts}
        messages.append(m)
    system = row.get("system")
    if isinstance(system, str) and system.strip() and not (
            messages and isinstance(messages[0], dict) and messages[0].get(
                "role", messages[0].get("from")) == "system"):
        messages = [{"role": "system", "content": system}] + messages
        changed = True
    lists = {kind: _field(row, "messages", lst, columns) for kind, lst in MEDIA_LISTS.items()}
    n_media = {kind: len(v) if isinstance(v, (list, tuple)) else 1 for kind, v in lists.items() if v not in (None, [])}
    if n_media:
        texts = []
        for m in messages:
            c = m.get("content", m.get("value")) if isinstance(m, dict) else None
            texts += [c] if isinstance(c, str) else [p.get("text", "") for p in c if isinstance(p, dict)] \
                if isinstance(c, list) else []  # a number or an object: refused by the reader, with its reason
        # A media part with no file of its own takes the next file of the top-level list. Arrow stores parts
        # as one struct, so TRL's save_to_disk layout gives {"type": "image", "text": None}: bare too.
        bare = any(isinstance(p, dict) and p.get("type") in MEDIA_TYPES and not _has_source(p)
                   for m in messages if isinstance(m, dict) and isinstance(m.get("content"), list) for p in m["content"])
        if not bare and not any(_has_tag(str(t)) for t in texts):
            messages = _media_first(messages, n_media, where)
            changed = True
    return {**row, key: messages} if changed else row


def _has_source(part: dict) -> bool:
    return any(part.get(k) is not None for k in ("path", "url", "bytes", part.get("type")))


def _media_first(messages: list, n_media: dict[str, int], where: str) -> list:
    """ms-swift's rule for media lists without tags: all of them open the first user turn."""
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            break
        role = m.get("role", m.get("from"))
        if role in ("user", "human"):
            tags = "".join(PLACEHOLDERS[k] * n for k, n in n_media.items())
            key = "content" if "content" in m else "value"
            c = m.get(key)
            if not isinstance(c, (str, list, type(None))):
                return messages  # a number or an object as content: the reader refuses it, with its reason
            new = tags + c if isinstance(c, str) else [{"type": k} for k, n in n_media.items() for _ in range(n)] + list(c or [])
            return messages[:i] + [{**m, key: new}] + messages[i + 1:]
    raise BadRecord("placeholder mismatch", "media are listed but the conversation has no user turn to hold them",
                    where, "add a user message, or remove the media lists")


def normalize_row(row: dict, fmt: str, columns: dict[str, str], where: str) -> tuple[dict, str, dict[str, str]]:
    """(row, format, columns) as the plain readers take them."""
    if fmt == "alpaca":
        return _normalise_messages(alpaca_row(row, columns, where), {}, where), "messages", {}
    if fmt != "messages":
        return row, fmt, columns
    if not any(k in row for k in ((columns["messages"],) if "messages" in columns else FORMAT_FIELDS["messages"]["messages"])):
        if "instruction" in row and "output" in row:
            return _normalise_messages(alpaca_row(row, {}, where), {}, where), "messages", {}
        if "query" in row and "response" in row:
            return _normalise_messages(query_response_row(row, where), {}, where), "messages", {}
        if "prompt" in row and "completion" in row:
            return _normalise_messages(prompt_completion_row(row, where), {}, where), "messages", {}
    return _normalise_messages(row, columns, where), fmt, columns


# ------------------------------------------------------------------------------- records, after
def finish_records(records: list[Record], row: dict, fmt: str, where: str) -> list[Record]:
    """A QA format's top-level `system` kept, and `<image>` tags in its question placed, not trained on."""
    if fmt not in QA_FORMATS:
        return records
    system = row.get("system")
    for r in records:
        user = r.messages[0]
        parts = content_parts(user["content"])
        text = part_text(parts)
        if _has_tag(text):
            media = [p for p in parts if p.get("type") in MEDIA_TYPES]
            queues = {k: [p for p in media if p["type"] == k] for k in MEDIA_TYPES}
            given = {k: len(q) for k, q in queues.items()}
            new = _split_placeholders(text, queues)
            if any(p.get("_missing") for p in new) or any(queues.values()):
                tags = {k: text.count(PLACEHOLDERS[k]) for k in MEDIA_TYPES}
                raise BadRecord("placeholder mismatch",
                                "the question's media tags do not match its media: "
                                + ", ".join(f"{given[k]} {k}(s), {tags[k]} {PLACEHOLDERS[k]} tag(s)"
                                            for k in MEDIA_TYPES if given[k] or tags[k]),
                                where, "put one <image> tag per image in the question, or none (the image then "
                                       "comes first)")
            r.messages[0] = {**user, "content": new}
        if isinstance(system, str) and system.strip() and r.messages[0].get("role") != "system":
            r.messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system}]})
    return records
