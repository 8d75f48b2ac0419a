"""Preference pairs: reading them (three public layouts), encoding both sides from one processor call, and
collating [chosen..., rejected...] rows with the media once.

Layouts (`data.format=preference`; a LLaMA-Factory `ranking: true` entry is read as this format):
- TRL's: `prompt` (a string or a list of messages), `chosen` / `rejected` (a string, one assistant message
  or a one-message list), media in `images` / `image` (conversational prompts place them with
  `{"type": "image"}` parts or `<image>` tags);
- LLaMA-Factory ranking (sharegpt): `conversations` (the prompt turns), `chosen` / `rejected` as
  `{"from": "gpt", "value": ...}`, `images`;
- RLAIF-V-style columns: `question`, `chosen`, `rejected`, `image` (plus its own bookkeeping columns).

A pair becomes one Record: its messages are the prompt plus the chosen answer (what SFT, evaluation and
the length checks read), `rejected` holds the rejected answer's parts. A bad pair (an empty side, a side
carrying media of its own) is a BadRecord, counted with its file:line like any bad record.

Encoding (`PairEncoder`): the chosen conversation goes through the run's Encoder (one processor call:
media decoded and expanded once); the rejected sequence is the chosen sequence's prompt tokens followed by
the rejected answer's tokens from the tokenizer alone (text only: no second media decode). Labels mark the
completion only: every token after the prompt (TRL's rule, so both tools train the same tokens). The
rejected side lives under `rejected_*` keys of the same item.
"""

from __future__ import annotations

from ..loss import TOKEN_MASK
from .formats import FORMAT_FIELDS, BadRecord, _get, bad_type
from .forwarding import Forwarding
from .records import MEDIA_TYPES, Record, content_parts, part_text
from .row_formats.messages import messages_records

REJECTED = "rejected_"  # prefix of the rejected side's per-token keys in an encoded pair
PAIR_MEDIA = "pair_media"  # a pair batch's names of the media tensors it holds once (objectives/dpo.py)


def _answer_parts(value, side: str, where: str) -> list[dict]:
    """A side of a pair as an assistant turn's parts: a string, {role|from, content|value}, or a list holding
    one such message. Media in an answer is refused: both sides share the prompt's media."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        value = value[0]
    if isinstance(value, dict):
        role = value.get("role", value.get("from"))
        if role is not None and role not in ("assistant", "gpt", "bot", "model"):
            raise BadRecord("bad pair", f"the {side} answer has role {role!r}, not assistant"[:200], where,
                            f"give {side} as the assistant's answer (a string or one assistant message)")
        value = value.get("content", value.get("value"))
    if isinstance(value, str):
        parts = [{"type": "text", "text": value}]
    elif isinstance(value, list) and all(isinstance(p, dict) for p in value):
        parts = content_parts(value)
    else:
        raise bad_type(f"the {side} answer", value, where,
                       f"give {side} as a string, one assistant message, or a list holding one")
    if any(p.get("type") in MEDIA_TYPES for p in parts):
        raise BadRecord("pair media differ", f"the {side} answer carries media of its own", where,
                        "both answers of a pair share the prompt's media: put media in the prompt only")
    if not part_text(parts).strip():
        raise BadRecord("no answer", f"the {side} answer is empty", where,
                        "give both sides of every pair a non-empty answer, or set data.on_bad_record=skip")
    return [{"type": "text", "text": part_text(parts)}]


def pair_records(row: dict, columns: dict[str, str], where: str, index: int, resolve) -> list[Record]:
    """One preference row -> one Record (prompt + chosen, with `rejected`)."""
    fields = FORMAT_FIELDS["preference"]
    rid = _get(row, "preference", "id", columns, where)
    rid = str(rid) if rid is not None else str(index)
    prompt = _get(row, "preference", "prompt", columns, where)
    chosen = _answer_parts(_get(row, "preference", "chosen", columns, where), "chosen", where)
    rejected = _answer_parts(_get(row, "preference", "rejected", columns, where), "rejected", where)
    if isinstance(prompt, str):
        media_n = sum(len(v) if isinstance(v, (list, tuple)) else 1 for k in ("images", "videos", "audios")
                      for v in [_get(row, "preference", k, columns, where)] if v is not None)
        tagged = any(t in prompt for t in ("<image>", "<video>", "<audio>"))
        # RLAIF-V's question names no image: the image comes first, as the QA formats place it.
        kinds = [(k[:-1], _get(row, "preference", k, columns, where)) for k in ("images", "videos", "audios")]
        tags = "".join(f"<{kind}>" * (len(v) if isinstance(v, (list, tuple)) else 1) for kind, v in kinds if v is not None)
        text = prompt if tagged or not media_n else tags + prompt
        messages = [{"role": "user", "content": text}]
    elif isinstance(prompt, list) and prompt:
        messages = list(prompt)
    else:
        raise bad_type("the prompt", prompt, where, "give the prompt as a string or a non-empty list of messages")
    row_msgs = {"messages": messages + [{"role": "assistant", "content": chosen}]}
    for ours in ("images", "videos", "audios"):
        names = (columns[ours],) if ours in columns else fields[ours]
        v = next((row[n] for n in names if row.get(n) is not None), None)
        if v is not None:
            row_msgs[ours] = v
    rec = messages_records(row_msgs, {}, where, rid, resolve)[0]
    rec.rejected = rejected
    return [rec]


def rejected_record(record: Record) -> Record:
    """The pair's rejected side as a conversation: the prompt turns and the rejected answer."""
    return Record(record.id, record.source, record.messages[:-1] + [{"role": "assistant", "content": record.rejected}],
                  references=[], origin=record.origin)


def needs_pair(record: Record) -> None:
    if getattr(record, "rejected", None) is None:
        raise BadRecord("no rejected answer", "record is no preference pair (it has no rejected answer)",
                        record.where(), "train.objective=dpo trains on pairs: give data.format=preference rows "
                                        "(prompt / chosen / rejected), or train.objective=sft")


def _common_prefix(a, b) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PairEncoder(Forwarding):
    """A preference record -> chosen and rejected sequences from one processor call (module docstring).
    `encode` and `measure` mirror the Encoder's; `measure`'s total is the longer side's."""

    wrapped = "encoder"

    def __init__(self, encoder):
        self.encoder = encoder

    def _texts(self, record: Record):
        enc = self.encoder
        full_c, spans_c = enc._trained_text(enc._template_messages(record.messages), record)
        rej = rejected_record(record)
        full_r, spans_r = enc._trained_text(enc._template_messages(rej.messages), rej)
        return full_c, spans_c[-1], full_r, spans_r[-1]

    def _split(self, record: Record):
        """(chosen text tokens, rejected text tokens, prompt tokens k, chosen answer span, rejected answer span)."""
        import numpy as np

        enc = self.encoder
        full_c, span_c, full_r, span_r = self._texts(record)
        tc, tr = enc._text_tokens(full_c), enc._text_tokens(full_r)
        ids_c, ids_r = tc["input_ids"].reshape(-1), tr["input_ids"].reshape(-1)
        # The completion starts where the two token sequences part, and never after the answer's first character
        # (TRL's rule: tokens that merge across the boundary belong to the completion).
        before = int(np.sum(tc["offset_mapping"].reshape(-1, 2)[:, 1] <= span_c[0]))
        k = min(_common_prefix(ids_c.tolist(), ids_r.tolist()), before)
        return tc, tr, k, span_c, span_r

    def encode(self, record: Record, *, check_length: bool = True) -> dict:
        import torch

        needs_pair(record)
        enc = self.encoder
        item = enc.encode(record, check_length=check_length)
        tc, tr, k, _, _ = self._split(record)
        ids_c = tc["input_ids"].reshape(-1)
        ids_r = tr["input_ids"].reshape(-1)
        expanded = item["input_ids"]
        tail_c = len(ids_c) - k
        prompt_len = int(expanded.shape[0]) - tail_c
        if tail_c <= 0 or not torch.equal(expanded[prompt_len:], torch.from_numpy(ids_c[k:])):
            from ..errors import DataError

            raise DataError("cannot find the chosen answer's tokens at the end of the encoded record",
                            where=record.where(), fix="report this model's processor to mmtune")

        # The completion: every token from the prompt's end on (the answer, its stop token and whatever the
        # template writes after it), the last answer only -- TRL's completion, token for token.
        labels_c = torch.full_like(item["labels"], -100)
        labels_c[prompt_len:] = expanded[prompt_len:]
        item["labels"] = labels_c
        rej_ids = torch.cat([expanded[:prompt_len], torch.from_numpy(ids_r[k:]).to(expanded.dtype)])
        if check_length:
            enc._check_length(int(rej_ids.shape[0]), record)
        item[REJECTED + "input_ids"] = rej_ids
        lab = torch.full_like(rej_ids, -100)
        lab[prompt_len:] = rej_ids[prompt_len:]
        item[REJECTED + "labels"] = lab
        n_c = int(expanded.shape[0])
        for key, v in list(item.items()):  # the other per-token keys: the prompt's values, then the answer's
            if key in ("input_ids", "labels") or key.startswith(REJECTED) or v.dim() != 1 or v.shape[0] != n_c:
                continue
            fill = 1 if key == "attention_mask" else 0
            tail = torch.full((len(ids_r) - k,), fill, dtype=v.dtype)
            item[REJECTED + key] = torch.cat([v[:prompt_len], tail])
        return item

    def measure(self, record: Record) -> dict:
        needs_pair(record)
        counts = self.encoder.measure(record)
        tc, tr, k, _, _ = self._split(record)
        extra = len(tr["input_ids"].reshape(-1)) - len(tc["input_ids"].reshape(-1))
        if extra > 0:  # the rejected side is longer: it sets the pair's length (the batch pads to it)
            counts = {**counts, "text": counts["text"] + extra, "total": counts["total"] + extra}
        if counts["total"] > self.encoder.max_length:
            self.encoder._check_length(counts["total"], record)
        return counts

    def token_counts(self, record: Record) -> dict:
        item = self.encode(record, check_length=False)
        counts = self.encoder.token_counts(record)
        extra = int(item[REJECTED + "input_ids"].shape[0]) - int(item["input_ids"].shape[0])
        if extra > 0:
            counts = {**counts, "text": counts["text"] + extra, "total": counts["total"] + extra}
        return counts


class PairCollator(Forwarding):
    """Encoded pairs -> one batch of 2N rows, [chosen 1..N, rejected 1..N], through the run's collator: the
    media keys come from the chosen items only, so pixels are collated once (the objective hands the
    model each media tensor once per side: objectives/dpo.py)."""

    wrapped = "collator"

    def __init__(self, collator):
        self.collator = collator

    def __call__(self, items: list[dict]) -> dict:
        chosen, rejected = [], []
        for it in items:
            chosen.append({k: v for k, v in it.items() if not k.startswith(REJECTED)})
            rejected.append({k[len(REJECTED):]: v for k, v in it.items() if k.startswith(REJECTED)})
        batch = self.collator(chosen + rejected)
        per_row = {k for r in rejected for k in r}
        per_row |= {TOKEN_MASK} if "attention_mask" in per_row else set()  # the mask kept for counting only
        # media are the tensors; a flag (use_audio_in_video, a bool) holds for both sides as it is
        batch[PAIR_MEDIA] = tuple(k for k in batch if k not in per_row and hasattr(batch[k], "shape"))
        return batch


def train_encoder(resolved, encoder):
    """The encoder the training records go through: the run's own, pairs of it for train.objective=dpo, prompts
    (data/prompts.py) for grpo."""
    t = resolved.cfg.train
    if t.objective == "grpo":
        from .prompts import PromptEncoder

        return PromptEncoder(encoder, t.grpo.max_completion_length)
    return PairEncoder(encoder) if t.objective == "dpo" else encoder


def train_collator(resolved, collator):
    if resolved.cfg.train.objective == "grpo":  # left padding: every completion starts at the same column
        from .collate import Collator
        from .prompts import PromptCollator

        return PromptCollator(Collator(collator.pad_token_id, collator.compute_dtype, padding_side="left"))
    return PairCollator(collator) if resolved.cfg.train.objective == "dpo" else collator
