"""A raw-text document (data.format=text) -> its tokens: what the encoder gives for a record with
`document=True`, in place of the chat template's rendering.

- BOS: as the tokenizer applies it (`add_special_tokens`: Llama's adds one, Qwen's none), never doubled: a
  document that starts with the BOS string gets none added (the rule `Encoder._add_special` applies to
  rendered conversations).
- EOS: appended after each document (the model learns to stop, and documents that packing joins stay
  separated), unless the tokenizer put one there already.
- Labels: every token (the "answer tokens" of this format are all of them).
- A document longer than data.max_length is cut into windows first (text_windows.py); one that reaches the
  encoder uncut and too long is refused as "too long", never truncated."""

from __future__ import annotations

from array import array

from ..errors import ConfigError
from .formats import BadRecord
from .records import Record, answer_text


def documents_only(data_cfg) -> bool:
    """Every source of the run is raw text: no record is rendered by a chat template (a base model trains)."""
    spec = getattr(data_cfg, "train", None)
    if isinstance(spec, (list, tuple)):
        return bool(spec) and all((getattr(s, "format", None) or data_cfg.format) == "text" for s in spec)
    return data_cfg.format == "text"


def require_chat_template(processor, cfg) -> None:
    """Every record but a raw-text document is rendered by the chat template: a model folder without one (a base
    model, an export that lost chat_template.jinja) is the model's error, said once at the start, not each
    record's (MM030). A run whose every source is raw text (data.format=text) needs none: a base model trains."""
    if documents_only(cfg.data):
        return
    tok = getattr(processor, "tokenizer", processor)
    if not (getattr(processor, "chat_template", None) or getattr(tok, "chat_template", None)):
        raise ConfigError(f"the processor / tokenizer of {cfg.model.name} has no chat template, so no record can be "
                          "rendered as a conversation (transformers: \"Cannot use apply_chat_template because this "
                          "processor does not have a chat template\")", where="model.name",
                          fix="use the instruct/chat variant of the model, or copy chat_template.jinja from the base "
                              "model into the folder; raw text trains without one: data.format=text")


def eos_id(encoder) -> int:
    tok = encoder.tokenizer
    if tok.eos_token_id is None:
        raise ConfigError("data.format=text appends the tokenizer's end-of-sequence token after each document, and "
                          "this tokenizer has none", where="model.name",
                          fix="use a tokenizer with an eos_token (set it in tokenizer_config.json)")
    return int(tok.eos_token_id)


def document_ids(encoder, record: Record) -> array:
    """All the document's token ids: the tokenizer's BOS convention, the text, the EOS."""
    text = answer_text(record)
    tok = encoder.tokenizer
    # A control token written inside the text is "special token in text", as in an answer; the document's own
    # BOS at its start and EOS at its end are its boundaries, as the tokenizer would write them.
    core = text[len(tok.bos_token):] if tok.bos_token and text.startswith(tok.bos_token) else text
    core = core[:-len(tok.eos_token)] if tok.eos_token and core.endswith(tok.eos_token) else core
    encoder._check_text(Record(record.id, record.source, [{"role": "assistant", "content": core}]))
    ids = encoder.tokenizer(text, add_special_tokens=encoder._add_special(text))["input_ids"]
    eos = eos_id(encoder)
    if not ids or ids[-1] != eos:
        ids = list(ids) + [eos]
    return array("l", ids)


def _ids(encoder, record: Record, check_length: bool) -> array:
    ids = record.tokens if record.tokens is not None else document_ids(encoder, record)
    if check_length and len(ids) > encoder.max_length:
        # training (in memory and streamed), eval, data inspect, the doctor and the planner cut documents first
        # (text_windows.py); a caller that did not is refused here rather than truncated
        raise BadRecord("too long", f"document is {len(ids)} tokens, over data.max_length={encoder.max_length}, and "
                        "was not cut into windows; it is not truncated", record.where(),
                        "cut it with mmtune.data.text_windows.windows_of first (training does), or raise "
                        "data.max_length")
    return ids


def encode_document(encoder, record: Record, check_length: bool = True) -> dict:
    """The record's tensors: input_ids, attention_mask, labels == input_ids, and zeros for the per-token keys a
    multimodal processor gives a text-only record (mm_token_type_ids: no media token)."""
    import torch

    ids = torch.tensor(_ids(encoder, record, check_length), dtype=torch.long)
    out = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    for key in text_only_keys(encoder):
        out[key] = torch.zeros_like(ids)
    return out


def measure_document(encoder, record: Record) -> dict:
    n = len(_ids(encoder, record, check_length=False))
    return {"text": n, "image": 0, "video": 0, "audio": 0, "total": n}


def text_only_keys(encoder) -> tuple[str, ...]:
    """The per-token keys besides input_ids / attention_mask that the processor gives a text-only record
    (Qwen3-VL's mm_token_type_ids), learnt once from a one-word call."""
    keys = getattr(encoder, "_document_keys", None)
    if keys is None:
        keys = ()
        if not encoder.text_only:
            out = encoder.processor(text=["a"], return_tensors="pt")
            keys = tuple(k for k in out if k not in ("input_ids", "attention_mask") and hasattr(out[k], "shape")
                         and out[k].shape == out["input_ids"].shape)
        encoder._document_keys = keys
    return keys
