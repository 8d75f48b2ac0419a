"""A floor under a text's token count without tokenizing it: refuses a record far over data.max_length in
microseconds, where tokenizing it could take minutes.

BPE tokenizers merge a long run without spaces ("yyyy...", a base64 blob, a minified JSON line) as one word, in
time that grows faster than its length: one answer of 1,000,000 characters took 5.5 s to tokenize here, 30 s
and more on a loaded machine, in every command that measures records (the training scan, `data inspect`, the
doctor), for a record that is refused as too long in the end.

The floor: every token stands for at most B bytes of the normalised text, B the longest token of the vocabulary
in UTF-8 bytes (byte-level BPE writes each byte as one character of 1-2 UTF-8 bytes; SentencePiece and WordPiece
pieces are the text itself; a byte-fallback piece `<0x0A>` stands for one byte; added tokens are in the
vocabulary too). So a text whose normalised form has N bytes has at least ceil(N / B) tokens: special tokens,
media expansion and the template only add to it. Computed only for texts longer than data.max_length
characters (a shorter one cannot be over the cap by this floor), and only for fast tokenizers that cannot write
an unknown token (byte-level BPE: Qwen, Llama 3, GPT-2; byte fallback: Llama 2, Mistral, Gemma); their normaliser
is applied first, as the tokenizer applies it.
"""

from __future__ import annotations

from .formats import BadRecord


def longest_token_bytes(tokenizer) -> int | None:
    """B above, or None when no floor holds: a tokenizer that is not a fast one, or one that can write an
    unknown token (WordPiece's [UNK] for a whole word, Unigram / BPE without byte fallback fusing a run of
    unknown characters into one <unk>): one token could then stand for any number of bytes."""
    import json

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    try:
        spec = json.loads(backend.to_str())
        vocab = tokenizer.get_vocab()
    except Exception:  # noqa: BLE001 - unreadable: no floor, the text is tokenized as before
        return None
    model = spec.get("model") or {}
    byte_level = "ByteLevel" in json.dumps(spec.get("pre_tokenizer"))  # every byte is a symbol of the alphabet
    if not (model.get("byte_fallback") or (model.get("type") == "BPE" and byte_level)):
        return None
    return max((len(t.encode("utf-8", "surrogatepass")) for t in vocab), default=None) or None


def at_least_tokens(tokenizer, text: str, longest: int | None) -> int:
    """A floor under len(tokenizer(text).input_ids) (module docstring); 0 when none can be given."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not longest or backend is None:
        return 0
    norm = getattr(backend, "normalizer", None)
    if norm is not None:
        text = norm.normalize_str(text)
    return -(-len(text.encode("utf-8", "surrogatepass")) // longest)


def refuse_over_floor(encoder, full: str, record) -> None:
    """The "too long" BadRecord when the record's rendered text `full` alone is certainly over
    data.max_length (its floor), before anything tokenizes it."""
    if len(full) <= encoder.max_length:
        return
    if encoder._longest_token is False:
        encoder._longest_token = longest_token_bytes(encoder.tokenizer)
    n = at_least_tokens(encoder.tokenizer, full, encoder._longest_token)
    if n > encoder.max_length:
        raise BadRecord("too long", f"record is at least {n} tokens ({len(full)} characters of text), over "
                        f"data.max_length={encoder.max_length}; it is not truncated", record.where(),
                        f"raise data.max_length above {n}, shorten the record, or set data.on_bad_record=skip to "
                        "drop such records (they are counted)")
