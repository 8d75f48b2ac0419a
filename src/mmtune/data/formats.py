"""Per-dataset formats: one raw row (a dict) -> one or more Records.

Public VQA sets name their fields differently (ChartQA `query`/`label`, InfoVQA `query`/`answers`,
OCR-VQA `questions`/`answers` lists per image); a format knows its names, `data.columns` renames
(ours -> theirs), and a missing field is an error naming the record and the fields that do exist
(failure mode 14) instead of a KeyError deep in a training loop.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from contextlib import contextmanager

from ..errors import DataError, MMTuneError
from .records import MEDIA_TYPES, Record

# Our field name -> the names tried in a row, in order (the first is the documented one).
FORMAT_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "messages": {"messages": ("messages", "conversations"), "images": ("images", "image"),
                 "videos": ("videos", "video"), "audios": ("audios", "audio"), "id": ("id",)},
    "vqa": {"image": ("image", "images"), "question": ("question",), "answer": ("answer", "answers"),
            "id": ("id", "question_id")},
    # Read by data/variants.py into `messages` rows (LLaMA-Factory's alpaca layout).
    "alpaca": {"instruction": ("instruction",), "input": ("input",), "output": ("output",), "system": ("system",),
               "history": ("history",), "images": ("images", "image"), "videos": ("videos", "video"),
               "audios": ("audios", "audio"), "id": ("id",)},
    # The published names first (data/published.py describes each dataset's layout), then the names
    # the datasets' Hugging Face copies use.
    "chartqa": {"image": ("imgname", "image"), "question": ("query", "question"), "answer": ("label", "answer"),
                "id": ("id",)},
    "infovqa": {"image": ("image_local_name", "image"), "question": ("question", "query"),
                "answer": ("answers", "answer"), "id": ("questionId", "question_id", "id")},
    # FSC147 rows come from its annotation + split files (data/published.py); the question and the
    # structured answer are written from data.question_template / data.answer_template.
    "fsc147": {"image": ("image",), "object": ("object",), "count": ("count",), "id": ("id",)},
    "ocrvqa": {"image": ("image", "image_path"), "question": ("questions",), "answer": ("answers",),
               "id": ("id", "image_id")},
    # Preference pairs (data/preference.py): TRL's prompt/chosen/rejected, LLaMA-Factory's ranking sharegpt,
    # RLAIF-V's question/chosen/rejected/image.
    "preference": {"prompt": ("prompt", "conversations", "messages", "question", "query"), "chosen": ("chosen",),
                   "rejected": ("rejected",), "images": ("images", "image"), "videos": ("videos", "video"),
                   "audios": ("audios", "audio"), "id": ("id", "idx")},
}
OPTIONAL = {"id", "images", "videos", "audios"}
PLACEHOLDERS = {"image": "<image>", "video": "<video>", "audio": "<audio>"}
_PLACEHOLDER_KIND = {p: k for k, p in PLACEHOLDERS.items()}
_PLACEHOLDER_RE = re.compile("(" + "|".join(re.escape(p) for p in PLACEHOLDERS.values()) + ")")  # once, not per record
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "system": "system", "bot": "assistant", "model": "assistant"}


class BadRecord(DataError):
    """A record that cannot be used; `reason` is the short key skips are counted under."""

    def __init__(self, reason: str, what: str, where: str, fix: str | None = None):
        self.reason = reason
        super().__init__(what, where, fix)

    def as_error(self) -> DataError:
        """The error raised under data.on_bad_record=error: the same message, plus the skip option."""
        fix = self.fix or ""
        if "on_bad_record" not in fix:
            fix = (fix + "; or " if fix else "") + "set data.on_bad_record=skip to skip such records (they are counted)"
        return DataError(self.what, self.where, fix)


# The reason a record is counted under when something in it raised an exception no reader foresaw.
UNFORESEEN = "unreadable record"


@contextmanager
def isolated(where: str):
    """One record's boundary: any exception its content raises inside a reader or a library it calls
    (a tokenizer given a lone surrogate, PIL given a header it cannot parse) becomes a BadRecord of that
    record, counted under data.on_bad_record like any other, instead of stopping every other record of
    the file. mmtune's own errors pass unchanged (a DataError is never skipped), and so does what is no
    record's doing (KeyboardInterrupt, SystemExit, MemoryError). The specific causes known are refused
    earlier with their own reasons; the fuzz test (tests/data/test_fuzz_records.py) counts any record
    that still reaches this boundary as a failure, so it stays a safety net, not a hiding place."""
    try:
        yield
    except (MMTuneError, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - the record boundary itself; the reason names the type
        raise BadRecord(UNFORESEEN, f"reading the record raised {type(e).__name__}: {str(e)[:200]}", where,
                        "fix or remove the record (if it looks valid, report it to mmtune with this line); or set "
                        "data.on_bad_record=skip to leave it out (it is counted)") from e


def isolated_method(method):
    """`isolated` around a method that takes a record first (the encoder's encode / measure / encode_prompt):
    whatever that record's content makes the processor or tokenizer raise is its BadRecord, for every caller
    (training's draws, the start-up measure, inspect, doctor, eval)."""
    import functools

    @functools.wraps(method)
    def run(self, record, *args, **kwargs):
        with isolated(record.where()):
            return method(self, record, *args, **kwargs)

    return run


def known_formats() -> list[str]:
    return sorted(FORMAT_FIELDS)


def check_format(fmt: str, columns: dict[str, str]) -> None:
    """Reject an unknown format or a column mapping for a field the format does not have (typos)."""
    import difflib

    from ..errors import ConfigError

    if fmt not in FORMAT_FIELDS:
        close = difflib.get_close_matches(fmt, known_formats(), n=1)
        raise ConfigError(f"unknown data.format {fmt!r}", where="data.format",
                          fix=(f"did you mean {close[0]!r}? " if close else "") + f"one of: {', '.join(known_formats())}")
    fields = FORMAT_FIELDS[fmt]
    for ours in columns:
        if ours not in fields:
            close = difflib.get_close_matches(ours, list(fields), n=1)
            raise ConfigError(f"data.columns names {ours!r}, which format {fmt!r} does not have",
                              where=f"data.columns.{ours}",
                              fix=(f"did you mean {close[0]!r}? " if close else "")
                              + f"the fields of {fmt!r} are: {', '.join(fields)} (mapping is ours: theirs)")


def _get(row: dict, fmt: str, name: str, columns: dict[str, str], where: str):
    """Value of our field `name` in `row`, or a BadRecord naming the fields the row has."""
    names = (columns[name],) if name in columns else FORMAT_FIELDS[fmt][name]
    for n in names:
        if n in row and row[n] is not None:
            return row[n]
    if name in OPTIONAL:
        return None
    have = ", ".join(sorted(map(str, row))) or "(none)"
    tried = " or ".join(repr(n) for n in names)
    reason = "no answer" if name == "answer" else "missing field"
    raise BadRecord(reason, f"record has no field {tried} (format {fmt!r} needs it as its {name!r})", where,
                    f"the record's fields are: {have}. Map yours with data.columns, e.g. "
                    f"data.columns.{name}=<field>, or pick another data.format ({', '.join(known_formats())})")


def _shown(value, limit: int) -> str:
    """repr(value) cut to `limit` characters, for an error message."""
    r = repr(value)
    return r if len(r) <= limit else r[:limit - 3] + "..."


def bad_type(what: str, value, where: str, fix: str) -> BadRecord:
    """A value of the wrong type: an error, never silently turned into text (a dict's repr is no answer)."""
    return BadRecord("bad type", f"{what} is a {type(value).__name__} ({_shown(value, 60)})", where, fix)


def text_value(value, what: str, where: str) -> str:
    """A question / answer field of the QA formats (and an id): a string; a number is written as text
    (VQA sets store counts and years as numbers); anything else is an error."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return str(value)
    raise bad_type(what, value, where, f"give the {what} as a string")


def count_value(value, where: str) -> int:
    """A counting record's count: a whole number >= 0 (3, 3.0 or "3"). NaN, a negative or a fraction is no
    count to train on: a bad record (counted), never "COUNT: nan" in the answer."""
    n = value
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        n = int(value.strip())
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        raise bad_type("count", value, where, "give the count as a whole number")
    if not math.isfinite(n) or n < 0 or n != int(n):
        raise BadRecord("bad count", f"count is {value!r}: not a whole number of objects >= 0", where,
                        "fix the count, or set data.on_bad_record=skip to leave the record out (it is counted)")
    return int(n)


def _bytes_part(kind: str, data, name, where: str) -> dict:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise bad_type(f"the {kind}'s bytes", data, where,
                       f'JSON cannot hold raw bytes: give a file path, {{"type": "{kind}", "path": "file"}}')
    return {"type": kind, "bytes": bytes(data), "name": name if isinstance(name, str) and name else f"<{kind} bytes>"}


def _in_memory(kind: str, value, resolve, where: str) -> dict:
    """`{"type": kind, kind: value}`: an object decoded in memory; a string is taken as a path."""
    if isinstance(value, str):
        return {"type": kind, "path": resolve(value, where)}
    ok = {"image": lambda v: hasattr(v, "convert") and hasattr(v, "mode"),
          "video": lambda v: isinstance(v, (list, tuple)) and len(v) > 0 or getattr(v, "ndim", 0) == 4,
          "audio": lambda v: (isinstance(v, tuple) and len(v) == 2) or getattr(v, "ndim", 0) in (1, 2)
          or (isinstance(v, list) and len(v) > 0 and all(isinstance(x, (int, float)) for x in v[:16]))}[kind]
    if not ok(value):
        raise bad_type(f"the {kind!r} value", value, where,
                       {"image": "give a PIL image, or a path string",
                        "video": "give a list of frames (PIL images or HxWx3 arrays), or a path string",
                        "audio": "give a 1-D sample array (with sampling_rate), or a path string"}[kind])
    return {"type": kind, kind: value}


def _media_part(kind: str, value, resolve: Callable[[str, str], str], where: str) -> dict:
    """A media value from a row: a path, an HF-datasets dict {bytes, path}, or an in-memory object."""
    if isinstance(value, str):
        return {"type": kind, "path": resolve(value, where)}
    if isinstance(value, (bytes, bytearray, memoryview)):  # a parquet / Arrow column of the file's bytes
        return _bytes_part(kind, value, None, where)
    if isinstance(value, dict) and ("bytes" in value or "path" in value):
        if value.get("bytes") is not None:
            return _bytes_part(kind, value["bytes"], value.get("path"), where)
        if value.get("path"):
            return {"type": kind, "path": resolve(value["path"], where)}
    if isinstance(value, dict) and "type" in value:  # already a part
        return _checked_part(value, resolve, where)
    if kind == "image" and hasattr(value, "convert"):  # a PIL image (datasets' decoded Image feature)
        return {"type": "image", "image": value}
    raise BadRecord("bad media", f"cannot read the {kind} field (a {type(value).__name__})", where,
                    f"give the {kind} as a file path, relative to data.media_root or the data file's folder")


def _checked_part(p: dict, resolve, where: str) -> dict:
    """A media part as written in a record, with its value's type checked and its path resolved."""
    kind = p.get("type")
    if kind not in MEDIA_TYPES:
        raise BadRecord("missing field", f"a media part has type {kind!r}", where, "type is image, video or audio")
    q = {k: v for k, v in p.items() if k not in ("url", "path", "bytes", kind)}
    if p.get("path") is not None or p.get("url") is not None:
        q["path"] = resolve(p["url"] if p.get("url") is not None else p["path"], where)
        return q
    if p.get("bytes") is not None:
        return {**q, **_bytes_part(kind, p["bytes"], p.get("name"), where)}
    if p.get(kind) is not None:
        return {**q, **_in_memory(kind, p[kind], resolve, where)}
    raise BadRecord("placeholder mismatch", f"a {kind} part without a path", where,
                    f'give it a path: {{"type": "{kind}", "path": "file"}}')


def _as_list(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _answer_and_refs(value, where: str) -> tuple[str, list[str]]:
    refs = [text_value(a, "answer", where) for a in _as_list(value) if a is not None]
    refs = [a for a in refs if a.strip() != ""]
    if not refs:
        raise BadRecord("no answer", "record has an empty answer", where,
                        "give every training/eval record a non-empty answer, or set data.on_bad_record=skip")
    return refs[0], refs


def _qa_record(rid: str, where: str, media: list[dict], question: str, answer: str, refs: list[str]) -> Record:
    user = media + [{"type": "text", "text": text_value(question, "question", where)}]
    return Record(id=rid, source=where, references=refs, messages=[
        {"role": "user", "content": user},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ])


def _split_placeholders(text: str, queues: dict[str, list[dict]]) -> list[dict]:
    """'<image>\\nWhat is it?' -> [image part, text part], taking media from the queues in order."""
    parts = []
    for piece in _PLACEHOLDER_RE.split(text):
        kind = _PLACEHOLDER_KIND.get(piece)
        if kind is not None:
            parts.append(queues[kind].pop(0) if queues[kind] else {"type": kind, "_missing": True})
        elif piece:
            parts.append({"type": "text", "text": piece})
    return parts


def _messages_records(row, columns, where, rid, resolve) -> list[Record]:
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
        if role is not None and role not in SHAREGPT_ROLES:
            raise BadRecord("bad conversation", f"message {i} has role {role!r}"[:200], where,
                            f"roles are {', '.join(sorted(set(SHAREGPT_ROLES)))}")
        role = SHAREGPT_ROLES.get(role) if role is not None else None
        if role is None or content is None:
            raise BadRecord("missing field", f"message {i} lacks a role or content (has {', '.join(sorted(map(str, m)))})",
                            where, "each message needs role (user/assistant/system) and content")
        if isinstance(content, str):
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
                    parts.extend(_split_placeholders(text, queues) if any(n_given.values())
                                 else [{**p, "text": text}])
                elif (p.get("path"), p.get("url"), p.get("bytes"), p.get(p["type"])) == (None,) * 4 and queues[p["type"]]:
                    parts.append(queues[p["type"]].pop(0))  # {"type": "image"} with the file in the top-level list
                else:
                    parts.append(_checked_part(p, resolve, where))
        else:
            raise bad_type(f"message {i}'s content", content, where, "content is a string or a list of parts")
        messages.append({"role": role, "content": parts})
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
    return [Record(id=rid, source=where, messages=messages)]


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
    named = ", ".join(f"{(columns.get(k + 's') or FORMAT_FIELDS['messages'][k + 's'][0])!r}" for k in kinds)
    have = ", ".join(sorted(map(str, row))) or "(none)"
    raise BadRecord("placeholder mismatch", "the text has " + ", ".join(f"{n} {t} tag(s)" for t, n in tags.items())
                    + f" but the record lists no {'/'.join(k + 's' for k in kinds)} (looked for {named})", where,
                    f"the record's fields are: {have}. Name the media field with data.columns (e.g. "
                    f"data.columns.images=<field>; a dataset_info entry: columns.images), or remove the tags")


DEFAULT_TEMPLATES = {"question": "How many {object} are there? Answer as COUNT: <number>.",
                     "answer": "COUNT: {count}"}


def row_to_records(row: dict, fmt: str, columns: dict[str, str], where: str, index: int,
                   resolve: Callable[[str, str], str], templates: dict[str, str] | None = None) -> list[Record]:
    """Records from one raw row. `resolve(path, where)` turns a media path into a checked absolute one;
    `templates` ({question, answer}) write counting sets' text from their fields. Other tools' layouts
    (alpaca, ms-swift, OpenAI parts, a top-level system) go through data/variants.py."""
    from .variants import finish_records, normalize_row

    if not isinstance(row, dict):
        raise BadRecord("missing field", f"record is a {type(row).__name__}, not an object", where,
                        "each record is a JSON object (one per line in JSONL)")
    row, fmt, columns = normalize_row(row, fmt, columns, where)
    records = finish_records(_plain_row_to_records(row, fmt, columns, where, index, resolve, templates), row, fmt,
                             where)
    for r in records:
        checked_text(r)
    return records


def checked_text(record: Record) -> None:
    """Text that is no Unicode text (a lone surrogate: JSON allows the escape `\\ud800`, UTF-8 has no such
    character) makes every tokenizer raise. Refused when the record is read, so that `data inspect`, the
    doctor and training's start-up measure all count it the same way, as bad encoding."""
    from .records import content_parts

    texts = [p.get("text") for m in record.messages for p in content_parts(m.get("content")) if p.get("type") == "text"]
    for t in texts + list(record.references):
        if not isinstance(t, str):
            continue
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as e:
            raise BadRecord("bad encoding", f"text holds {t[e.start]!r}, a lone surrogate (no character: an escape "
                            f"like \\ud800 without its pair) in {t[max(0, e.start - 20):e.start]!r}...", record.source,
                            "re-export the text as UTF-8 (the tool that wrote it split a character in two)") from None


def _plain_row_to_records(row: dict, fmt: str, columns: dict[str, str], where: str, index: int,
                          resolve: Callable[[str, str], str], templates: dict[str, str] | None = None) -> list[Record]:
    rid = _get(row, fmt, "id", columns, where)
    rid = text_value(rid, "id", where) if rid is not None else str(index)
    if fmt == "messages":
        return _messages_records(row, columns, where, rid, resolve)
    if fmt == "preference":
        from .preference import pair_records

        return pair_records(row, columns, where, index, resolve)
    from .published import default_image, with_media_dirs

    resolve = with_media_dirs(resolve, fmt)
    fallback = default_image(row, fmt, rid)
    names = (columns["image"],) if "image" in columns else FORMAT_FIELDS[fmt]["image"]
    has_image = any(row.get(n) is not None for n in names)
    img = _get(row, fmt, "image", columns, where) if has_image or fallback is None else fallback
    media = [_media_part("image", v, resolve, where) for v in _as_list(img)]
    if fmt == "fsc147":
        t = {**DEFAULT_TEMPLATES, **(templates or {})}
        fields = {"object": text_value(_get(row, fmt, "object", columns, where), "object", where),
                  "count": count_value(_get(row, fmt, "count", columns, where), where)}
        answer = t["answer"].format(**fields)
        rec = _qa_record(rid, where, media, t["question"].format(**fields), answer, [answer])
        # What the heatmap auxiliary loss compares with (mmtune.aux_losses.heatmap).
        rec.targets = {k: row[k] for k in ("density", "points", "size") if row.get(k) is not None}
        return [rec]
    question = _get(row, fmt, "question", columns, where)
    answer = _get(row, fmt, "answer", columns, where)
    if fmt == "ocrvqa":
        qs, ans = _as_list(question), _as_list(answer)
        if len(qs) != len(ans):
            raise BadRecord("missing field", f"{len(qs)} questions but {len(ans)} answers", where,
                            "OCR-VQA rows pair questions[i] with answers[i]; fix the row or skip it")
        out = []
        for k, (q, a) in enumerate(zip(qs, ans)):
            target, refs = _answer_and_refs(a, f"{where} (QA {k})")
            out.append(_qa_record(f"{rid}#{k}", where, [dict(m) for m in media], q, target, refs))
        return out
    target, refs = _answer_and_refs(answer, where)
    if isinstance(question, (list, tuple)):
        raise BadRecord("missing field", f"question is a list ({len(question)} items) in format {fmt!r}", where,
                        "use data.format=ocrvqa for rows with several questions per image")
    return [_qa_record(rid, where, media, question, target, refs)]
