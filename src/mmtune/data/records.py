"""The one record shape every source and format produces, and small helpers to read it.

A `Record` is a conversation: `messages` is a list of `{"role", "content": [parts]}` where a part is
`{"type": "text", "text": ...}` or a media part `{"type": "image"|"video"|"audio", "path": ...}`
(path already resolved) or an in-memory object under the key named by its type
(`{"type": "image", "image": <PIL.Image>}`). A video part may carry `"use_audio": true` to feed its
own audio track too. The answer is the last assistant turn. An assistant message with `"train": False`
(another tool's switch for it, data/foreign.py) is rendered but not trained on.

Tool calling (data/tool_calls.py): an assistant message may carry `"tool_calls": [{"type": "function",
"function": {"name", "arguments": {...}}}]` (its content then may be empty), a `"role": "tool"` message holds a
tool's result as its content, and `Record.tools` the row's tool schemas, which the chat template renders.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MEDIA_TYPES = ("image", "video", "audio")


@dataclass
class Record:
    id: str
    source: str  # "file:line" (or "file:record N"), where a user finds it
    messages: list[dict]
    # Extra reference answers kept for metrics (e.g. all InfoVQA answers); the target is the last turn.
    references: list[str] = field(default_factory=list)
    # The mixture source it came from (data.train as a list); evaluation groups metrics by it.
    origin: str = ""
    # Targets for auxiliary losses (mmtune.aux_losses), e.g. FSC147's density map path and points;
    # a record without them contributes nothing to those losses.
    targets: dict = field(default_factory=dict)
    # A preference pair's rejected answer (assistant content parts; data/preference.py); `messages` ends with
    # the chosen one. None: no pair.
    rejected: list[dict] | None = None
    # The row's tool schemas ([{"type": "function", "function": {...}}], data/tool_calls.py); None: no tools.
    tools: list[dict] | None = None
    # A raw-text document (data.format=text, data/documents.py): its one message's text is trained whole, with
    # no chat template, the tokenizer's BOS convention and an EOS after it. `tokens`: the token ids of one of its
    # windows (data/text_windows.py), set once the document is cut to data.max_length; None: not cut yet.
    document: bool = False
    tokens: object = None  # array.array("l") of token ids: compact, picklable, comparable

    def media_parts(self) -> list[dict]:
        return media_parts(self.messages)

    def answer_text(self) -> str:
        return answer_text(self)

    def where(self) -> str:
        return f"{self.source} (record {self.id})"


@dataclass
class RecordSet:
    """Records that loaded, plus what was skipped (counted by reason, never silently) and why."""

    records: list[Record] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (source, reason), first few per reason
    notes: list[str] = field(default_factory=list)  # decisions taken while loading (e.g. split alias used)

    MAX_PROBLEMS_PER_REASON = 20

    def skip(self, source: str, reason: str, detail: str) -> None:
        n = self.skipped.get(reason, 0)
        self.skipped[reason] = n + 1
        if n < self.MAX_PROBLEMS_PER_REASON:
            self.problems.append((source, detail))

    def bad(self, e, source: str, policy: str) -> None:
        """data.on_bad_record for a BadRecord `e`: "error" raises it as a DataError, "skip" counts it here."""
        if policy == "error":
            raise e.as_error() from None
        self.skip(source, e.reason, e.what)

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def __getitem__(self, i):
        return self.records[i]

    def summary(self) -> str:
        s = f"{len(self.records)} records"
        if self.skipped:
            s += ", skipped " + ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
        return s


def content_parts(content) -> list[dict]:
    """A message's content as a list of parts (a plain string becomes one text part)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def part_text(parts: list[dict]) -> str:
    return "".join(p.get("text", "") for p in parts if p.get("type") == "text")


def media_parts(messages: list[dict]) -> list[dict]:
    return [p for m in messages for p in content_parts(m.get("content")) if p.get("type") in MEDIA_TYPES]


def last_assistant_index(messages: list[dict]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return i
    return None


def answer_text(record: Record) -> str:
    """The target: the text of the last assistant turn."""
    i = last_assistant_index(record.messages)
    if i is None:
        return ""
    return part_text(content_parts(record.messages[i]["content"]))


def media_label(part: dict) -> str:
    """How a media part is named in messages: its path, or `<in-memory image>`."""
    if part.get("path") is not None:
        return str(part["path"])
    if part.get("frames"):  # a video as its frames' files
        return f"{part['frames'][0]} (+{len(part['frames']) - 1} more frame files)"
    return f"<in-memory {part.get('type')}>"


def trained_only(full: str, spans: list, record: Record) -> tuple[str, list]:
    """(text, spans) with the spans of assistant turns marked `"train": False` left out (spans are the
    assistant turns', in order)."""
    flags = [m.get("train", True) for m in record.messages if m.get("role") == "assistant"]
    if all(flags) or len(flags) != len(spans):
        return full, spans
    return full, [s for s, keep in zip(spans, flags) if keep]
