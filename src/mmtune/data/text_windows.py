"""Raw-text documents (data.format=text) cut to data.max_length: each document's tokens (documents.py: BOS as
the tokenizer applies it, the text, EOS) become consecutive windows, each a record of its own for batching
(shuffled, packed, cached, counted like any record); nothing is truncated.

A window after a document's first starts with the token its predecessor ended on: the first position of a
sequence is never a prediction target (the loss predicts token t+1 from tokens <= t), so without that one
token of overlap the first token of every later window would never be trained. With it, every token of the
document after its first is predicted exactly once, and the last window always predicts at least one token.
Cut once, where the encoder is at hand (training's start-up, eval, `data inspect`, the doctor, the planner), and
said in the start-up summary: "N documents -> M windows"."""

from __future__ import annotations

from .documents import document_ids
from .formats import BadRecord, isolated
from .records import Record, RecordSet


def spans(n: int, length: int) -> list[tuple[int, int]]:
    """Token ranges [start, end) of the windows of an n-token document, each at most `length` tokens; a window
    after the first starts on its predecessor's last token (the module docstring)."""
    if length < 2:
        raise ValueError("a window needs at least 2 tokens")
    out, start = [], 0
    while True:
        end = min(start + length, n)
        out.append((start, end))
        if end >= n:
            return out
        start = end - 1


def windows_of(record: Record, encoder) -> list[Record]:
    """The records `record` trains as: a raw-text document not cut yet -> its windows (one when it fits); any other
    record -> itself. Raises the document's BadRecord (a turn token in its text)."""
    if not record.document or record.tokens is not None:
        return [record]
    ids = document_ids(encoder, record)
    parts = spans(len(ids), encoder.max_length)
    r = record
    if len(parts) == 1:
        return [Record(id=r.id, source=r.source, messages=r.messages, origin=r.origin, document=True, tokens=ids)]
    out = []
    for k, (a, b) in enumerate(parts):
        text = encoder.tokenizer.decode(ids[a:b].tolist())  # what the window holds, for inspect and reports
        out.append(Record(id=f"{r.id}/w{k + 1}", source=r.source, origin=r.origin, document=True, tokens=ids[a:b],
                          messages=[{"role": "assistant", "content": [{"type": "text", "text": text}]}]))
    return out


def cut_documents(records: list[Record], encoder) -> list[Record]:
    """windows_of over a row's records (the doctor's data pass reads row by row)."""
    return [w for r in records for w in windows_of(r, encoder)]


def windowed(rs: RecordSet, encoder, policy: str) -> RecordSet:
    """`rs` with each raw-text document replaced by its windows (in place, and returned); a document that
    cannot be tokenized (a turn token in its text) follows data.on_bad_record. Records of other formats,
    and windows already cut, are kept as they are."""
    if not any(r.document and r.tokens is None for r in rs.records):
        return rs
    out: list[Record] = []
    docs = cut = 0
    for r in rs.records:
        if not r.document or r.tokens is not None:
            out.append(r)
            continue
        try:
            with isolated(r.where()):
                got = windows_of(r, encoder)
        except BadRecord as e:
            rs.bad(e, r.source, policy)
            continue
        docs += 1
        cut += len(got) > 1
        out.extend(got)
    rs.records = out
    windows = sum(1 for r in out if r.document)
    rs.notes.append(f"{docs} documents -> {windows} windows of at most {encoder.max_length} tokens (data.max_length): "
                    f"{cut} longer document(s) cut into consecutive windows, each after the first starting on the "
                    "token before it so that every token is trained once; none truncated")
    return rs
