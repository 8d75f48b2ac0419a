"""Per-dataset formats: their registry (`FORMATS`, one module each under data/row_formats/), the bad-record
error every reader raises, and the helpers the format modules read a row with.

Public VQA sets name their fields differently (ChartQA `query`/`label`, InfoVQA `query`/`answers`,
OCR-VQA `questions`/`answers` lists per image); a format knows its names, `data.columns` renames
(ours -> theirs), and a missing field is an error naming the record and the fields that do exist
(failure mode 14) instead of a KeyError deep in a training loop. One raw row -> its Records:
row_records.row_to_records.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from contextlib import contextmanager

from ..errors import DataError, MMTuneError
from .records import MEDIA_TYPES, Record

# data.format -> the module that defines it (data/row_formats/<name>.py: its FIELDS, our field name -> the names
# tried in a row, the first documented, and its to_records). Adding a format is one module there and one line
# here (docs/internals.md "Adding a data format"). Imported on first use: the modules use this one's helpers.
FORMATS: dict[str, str] = {
    "messages": ".row_formats.messages",
    "vqa": ".row_formats.vqa",
    "alpaca": ".row_formats.alpaca",
    "chartqa": ".row_formats.chartqa",
    "infovqa": ".row_formats.infovqa",
    "fsc147": ".row_formats.fsc147",
    "ocrvqa": ".row_formats.ocrvqa",
    "preference": ".row_formats.preference",
    "asr": ".row_formats.asr",
    "text": ".row_formats.text",
}


_MODULES: dict[str, object] = {}  # by module path: every row asks (importlib's own lookup costs ~2 us a row)


def format_module(fmt: str):
    """The module of data.format `fmt` (a name in FORMATS)."""
    path = FORMATS[fmt]
    mod = _MODULES.get(path)
    if mod is None:
        import importlib

        mod = _MODULES[path] = importlib.import_module(path, __package__)
    return mod


class _FormatFields(Mapping):
    """FORMAT_FIELDS[fmt]: the FIELDS of the format's module, read when first asked."""

    def __getitem__(self, fmt: str) -> dict[str, tuple[str, ...]]:
        if fmt not in FORMATS:
            raise KeyError(fmt)
        return format_module(fmt).FIELDS

    def __iter__(self):
        return iter(FORMATS)

    def __len__(self) -> int:
        return len(FORMATS)

    def __contains__(self, fmt) -> bool:
        return fmt in FORMATS


FORMAT_FIELDS: Mapping[str, dict[str, tuple[str, ...]]] = _FormatFields()
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
    except BadRecord as e:
        if e.where:
            raise
        raise BadRecord(e.reason, e.what, where, e.fix) from None  # raised where the record was not known (system_turn)
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
    if name not in columns and isinstance(row.get("text"), str) and fmt != "text":
        # a continued-pretraining row (TRL's dataset_text_field, LLaMA-Factory's stage pt): mapping `text` to
        # the missing field, which the generic fix below suggests, would only fail again one step later
        raise BadRecord(reason, f"record is one raw 'text' document, not a conversation (format {fmt!r} needs "
                        f"{tried})", where,
                        "set data.format=text to train on raw text (continued pretraining: every token of each "
                        "document trained, an EOS after it, no chat template; docs/data.md \"Raw text\")")
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


def _from_string(kind: str, value: str, resolve: Callable[[str, str], str], where: str) -> dict:
    """A media value given as a string, wherever a record holds one (a row's image column, a part's `image`
    value): a path, or a data: / file:// URL, read as a part's `url` is. qwen_vl_utils' messages write every
    image this way (`{"type": "image", "image": "file:///a.jpg"}` or `"data:image;base64,..."`), as do ms-swift's
    base64 images; read as a path, such a URL was "media file not found: <folder>/data:image;base64,...")."""
    if value.startswith(("data:", "file://")):
        return _checked_part({"type": kind, "url": value}, resolve, where)
    return {"type": kind, "path": resolve(value, where)}


def _frame_names(value) -> bool:
    """A video given as its frames' file names (a non-empty list of strings)."""
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(v, str) for v in value)


def _frame_files(names, resolve: Callable[[str, str], str], where: str) -> dict:
    """A video given as a list of its frames' files, in order: qwen_vl_utils' `{"type": "video", "video":
    ["file:///f1.jpg", ...]}` (Qwen's README) and LLaMA-Factory's `videos: [["f1.jpg", ...]]`. Each name is a
    path or file:// URL, resolved like any media path (a missing frame is that record's "missing media");
    the part holds the resolved paths under `frames` (data/media.py samples from them as from a folder)."""
    frames = [_from_string("image", name, resolve, where) for name in names]
    if any("path" not in f for f in frames):
        raise BadRecord("bad media", "a video frame given as a data: URL", where,
                        "save the frames as image files and list their paths")
    return {"type": "video", "frames": [f["path"] for f in frames]}


def _in_memory(kind: str, value, resolve, where: str) -> dict:
    """`{"type": kind, kind: value}`: an object decoded in memory; a string is a path or URL (_from_string)."""
    if isinstance(value, str):
        return _from_string(kind, value, resolve, where)
    if kind == "video" and _frame_names(value):
        return _frame_files(value, resolve, where)
    ok = {"image": lambda v: hasattr(v, "convert") and hasattr(v, "mode"),
          # every frame an image or an HxW(xC) array (a list of file names was taken above: _frame_files)
          "video": lambda v: (isinstance(v, (list, tuple)) and len(v) > 0 and all(
              hasattr(f, "convert") or getattr(f, "ndim", 0) in (2, 3) for f in v)) or getattr(v, "ndim", 0) == 4,
          "audio": lambda v: (isinstance(v, tuple) and len(v) == 2) or getattr(v, "ndim", 0) in (1, 2)
          # every sample: one null or string deep in a JSON array made numpy raise when the clip was measured
          or (isinstance(v, list) and len(v) > 0 and all(isinstance(x, (int, float)) for x in v))}[kind]
    if not ok(value):
        raise bad_type(f"the {kind!r} value", value, where,
                       {"image": "give a PIL image, or a path string",
                        "video": "give a list of frames (PIL images or HxWx3 arrays, or their files' paths), or a "
                                 "path string (a video file, or a folder of frame images)",
                        "audio": "give a 1-D sample array (with sampling_rate), or a path string"}[kind])
    return {"type": kind, kind: value}


def _media_part(kind: str, value, resolve: Callable[[str, str], str], where: str) -> dict:
    """A media value from a row: a path, an HF-datasets dict {bytes, path}, or an in-memory object."""
    if isinstance(value, str):
        return _from_string(kind, value, resolve, where)
    if kind == "video" and _frame_names(value):  # LLaMA-Factory's `videos: [["f1.jpg", "f2.jpg", ...]]`
        return _frame_files(value, resolve, where)
    if isinstance(value, (bytes, bytearray, memoryview)):  # a parquet / Arrow column of the file's bytes
        return _bytes_part(kind, value, None, where)
    if kind == "audio" and isinstance(value, dict) and value.get("array") is not None:
        # datasets' decoded Audio feature, {"array", "sampling_rate", "path"} (a dataset saved after decoding):
        # the samples are here, and its `path` names the file inside the dataset's archive, not one on this disk
        part = _in_memory("audio", value["array"], resolve, where)
        return part if value.get("sampling_rate") is None else {**part, "sampling_rate": value["sampling_rate"]}
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


def _data_url_bytes(url: str, kind: str, where: str) -> bytes:
    """The bytes of a base64 `data:` URL (an OpenAI-style image_url, or a data URL where a path goes)."""
    import base64
    import binascii

    head, comma, payload = url.partition(",")
    if not comma or not payload.strip():  # "data:image/png;base64" alone: no data to decode
        raise BadRecord("bad media", f"the {kind} data: URL holds no data (expected data:<mime>;base64,<data>)", where,
                        "give the whole URL, or a path")
    if ";base64" not in head:
        raise BadRecord("bad media", f"a {kind} data: URL that is not base64", where, "encode the data as base64")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise BadRecord("bad media", f"the {kind} data: URL holds invalid base64", where,
                        "re-encode the file, or give a path") from None



def _checked_part(p: dict, resolve, where: str) -> dict:
    """A media part as written in a record, with its value's type checked and its path resolved."""
    kind = p.get("type")
    if kind not in MEDIA_TYPES:
        raise BadRecord("missing field", f"a media part has type {kind!r}", where, "type is image, video or audio")
    q = {k: v for k, v in p.items() if k not in ("url", "path", "bytes", "frames", kind)}
    listed = p.get("frames") if p.get("frames") is not None else p.get("path")
    if kind == "video" and _frame_names(listed):  # frame files listed under `frames` (or `path`)
        return {**q, **_frame_files(listed, resolve, where)}
    ref = p["url"] if p.get("url") is not None else p.get("path")
    if ref is not None:
        if isinstance(ref, str) and ref.startswith("data:"):  # a data URL where a path goes, as OpenAI parts hold one
            if kind == "video":
                raise BadRecord("bad media", "a video given as a data: URL", where,
                                "save the video to a file and give its path (videos are decoded from files)")
            return {**q, **_bytes_part(kind, _data_url_bytes(ref, kind, where), f"<{kind} data URL>", where)}
        if isinstance(ref, str) and ref.startswith("file://"):  # a local file as a URL: its path
            ref = ref[len("file://"):]
        q["path"] = resolve(ref, where)
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


def checked_text(record: Record) -> None:
    """Text that is no Unicode text (a lone surrogate: JSON allows the escape `\\ud800`, UTF-8 has no such
    character) makes every tokenizer raise. Refused when the record is read, so that `data inspect`, the
    doctor and training's start-up measure all count it the same way, as bad encoding."""
    from .records import content_parts

    texts = [p.get("text") for m in record.messages for p in content_parts(m.get("content")) if p.get("type") == "text"]
    # a preference pair's rejected answer is tokenized too (data/preference.py: PairEncoder)
    texts += [p.get("text") for p in getattr(record, "rejected", None) or [] if p.get("type") == "text"]
    for t in texts + list(record.references):
        if not isinstance(t, str):
            continue
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as e:
            raise BadRecord("bad encoding", f"text holds {t[e.start]!r}, a lone surrogate (no character: an escape "
                            f"like \\ud800 without its pair) in {t[max(0, e.start - 20):e.start]!r}...", record.source,
                            "re-export the text as UTF-8 (the tool that wrote it split a character in two)") from None
