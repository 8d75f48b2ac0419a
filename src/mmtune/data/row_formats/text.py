"""data.format=text: raw text for continued pretraining, one document a row (a `text` field: TRL's
dataset_text_field, LLaMA-Factory's stage-pt corpora, axolotl's `type: completion`), or one `.txt` file a
document. The record is the document alone: no chat template, the tokenizer's BOS convention, an EOS after it,
and every token trained (data/documents.py); a document longer than data.max_length is cut into windows
(data/text_windows.py), never truncated."""

from __future__ import annotations

from ..formats import BadRecord, _get, bad_type
from ..records import Record

FIELDS = {"text": ("text", "content"), "id": ("id",)}


def to_records(row, fmt, columns, where, index, rid, resolve, templates=None) -> list[Record]:
    text = _get(row, fmt, "text", columns, where)
    if not isinstance(text, str):
        raise bad_type("the document's text", text, where, "give each document as a string")
    if not text.strip():
        raise BadRecord("empty document", "the document's text is empty", where,
                        "remove the row, or set data.on_bad_record=skip to leave such rows out (they are counted)")
    return [document_record(rid, where, text)]


def document_record(rid: str, where: str, text: str) -> Record:
    """A raw-text document as a Record: its text is the one (assistant) message, so every reader that shows or
    checks a record's text (data inspect, the Unicode check, the special-token check) reads it as it reads an
    answer; `document=True` sends it past the chat template."""
    return Record(id=rid, source=where, document=True,
                  messages=[{"role": "assistant", "content": [{"type": "text", "text": text}]}])
