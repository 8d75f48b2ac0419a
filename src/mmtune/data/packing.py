"""Sequence packing (data.packing): several records per row of up to data.max_length tokens, each
record seeing only itself.

Which records share a row: `packed_micro_batches` -- a pure function of (seed, epoch, lengths,
capacity), so resume needs only (epoch, micro-batch index) and every rank computes the same rows.
The epoch's shuffled order is cut into windows of PACK_WINDOW records; each window is packed
best-fit-decreasing (longest record first, into the fullest row it still fits, ties by index); the rows
are shuffled by (seed, epoch), grouped into global batches of micro_batch_size x world_size rows, and each
rank takes its slice. The ragged tail of rows is dropped this epoch (as unpacked batches drop theirs).

What a row is: `pack_row` concatenates the records' encodings in order --
- per-token keys (`input_ids`, `labels`, `mm_token_type_ids`, ...) end to end; `attention_mask` is
  dropped, so transformers detects the records from `position_ids` (a position that does not follow
  the one before starts a new sequence: a block-diagonal causal mask under SDPA/eager, varlen
  FlashAttention-2 under FA2);
- `position_ids` restart at 0 for every record. For M-RoPE models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL)
  they are (4, L): row 0 the per-record text positions transformers reads the record boundaries from,
  rows 1-3 the model's own `get_rope_index` on each record alone (compat.rope_index.RopeIndex);
- each record's first label is -100: the last token of the record before must not be trained to
  predict it (an unpacked run never predicts a record's first token either), so the loss is the same
  sum over the same answer tokens;
- media tensors concatenated in record order, as the collator batches them: the vision tower sees each
  record's images in order and the model scatters them into the placeholders in order;
- `token_mask` (ones): which positions of a collated batch are tokens rather than padding.
  Never given to the model (loss.model_inputs drops it).

Under FlashAttention-2 a micro-batch's rows are given to the model as one row, end to end (`joins_rows`):
transformers' FA2 reads record boundaries from `position_ids` only in a batch of one row
(modeling_flash_attention_utils._is_packed_sequence, "flattened sequences only"); with two rows or more it runs
plain causal attention over each row, and every record attends to the records packed before it. One row of the
same records gives varlen attention over each record alone (and needs no padding). SDPA and eager build their
block-diagonal mask per row, so their rows stay apart (a joined row's mask would grow with the square of its length).
"""

from __future__ import annotations

import bisect
import random

from ..loss import TOKEN_MASK

PACK_WINDOW = 1024  # records packed together: wide enough to fill rows, narrow enough to stay random
DROPPED = ("attention_mask",)  # its absence is what makes transformers read the records from position_ids
JOINED_UNDER = ("flash_attention_2",)  # attentions that see packed records only in a one-row batch (module docstring)


def joins_rows(attn: str) -> bool:
    """Whether a packed micro-batch is given to the model as one row under the attention `attn` (module docstring)."""
    return attn in JOINED_UNDER


def pack_indices(indices: list[int], lengths: list[int], capacity: int) -> list[list[int]]:
    """Best-fit-decreasing: rows of records whose lengths add up to at most `capacity`, in a deterministic
    order (by length, then index). A record longer than `capacity` cannot be packed: ValueError (the
    start-up scan refuses such records as "too long", so the loop never sees one)."""
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (room left, row index), sorted: the fullest row that fits comes first
    for i in sorted(indices, key=lambda i: (-lengths[i], i)):
        n = lengths[i]
        if n > capacity:
            raise ValueError(f"record {i} has {n} tokens, more than a packed row's {capacity}")
        at = bisect.bisect_left(free, (n, -1))
        if at < len(free):
            room, r = free.pop(at)
        else:
            room, r = capacity, len(rows)
            rows.append([])
        rows[r].append(i)
        if room - n > 0:
            bisect.insort(free, (room - n, r))
    return rows


def packed_micro_batches(order: list[int], lengths: list[int], *, seed: int, epoch: int, micro_batch_size: int,
                         capacity: int, rank: int = 0, world_size: int = 1) -> list[list[list[int]]]:
    """This rank's micro-batches of one epoch: each a list of `micro_batch_size` rows of record indices."""
    rows: list[list[int]] = []
    for s in range(0, len(order), PACK_WINDOW):
        rows += pack_indices(order[s:s + PACK_WINDOW], lengths, capacity)
    random.Random(f"pack:{seed}:{epoch}").shuffle(rows)
    g = micro_batch_size * world_size
    usable = (len(rows) // g) * g
    return [rows[b + rank * micro_batch_size:b + (rank + 1) * micro_batch_size] for b in range(0, usable, g)]


def pack_row(items: list[dict], rope_index=None) -> dict:
    """One row from encoded records (see the module docstring). `rope_index(item) -> (3, L)` for M-RoPE models."""
    import torch

    from .collate import _pad_views

    if not items:
        raise ValueError("cannot pack an empty row")
    lens = [int(it["input_ids"].shape[-1]) for it in items]
    keys: list[str] = []
    for it in items:
        keys += [k for k in it if k not in keys and k not in DROPPED]
    per_token = {k for k in keys if all(k not in it or (it[k].dim() == 1 and it[k].shape[0] == n)
                                        for it, n in zip(items, lens))}
    row = {}
    for k in keys:
        if k in per_token:
            ref = next(it[k] for it in items if k in it)
            parts = [it[k] if k in it else torch.zeros(n, dtype=ref.dtype) for it, n in zip(items, lens)]
            if k == "labels":
                parts = [p.clone() for p in parts]
                for p in parts:
                    p[0] = -100  # never predicted from the record before (see the module docstring)
            row[k] = torch.cat(parts)
        elif k != "position_ids":
            vals = [it[k] if it[k].dim() else it[k].reshape(1) for it in items if k in it]
            row[k] = torch.cat(_pad_views(vals), dim=0)
    positions = []
    for it, n in zip(items, lens):
        text = torch.arange(n)
        positions.append(torch.cat([text[None], rope_index(it)]) if rope_index is not None else text)
    row["position_ids"] = torch.cat(positions, dim=-1)
    row[TOKEN_MASK] = torch.ones(sum(lens), dtype=torch.long)
    return row


class PackedRows:
    """A dataset of rows over a dataset of records: `rows[[i, j, k]]` is records i, j, k packed. The
    loop's batch sampler yields micro-batches of rows, so the DataLoader (and its workers) packs.

    A record the underlying dataset reports bad (`{bad_key: info}`) is left out of its row and passed
    on under `bad_key` as a list, for the loop's data.on_bad_record handling.

    `join` (`joins_rows(attn)`): a micro-batch's rows come out as one row holding all their records, in order."""

    def __init__(self, records, rope_index=None, bad_key: str | None = None, join: bool = False):
        self.records, self.rope_index, self.bad_key, self.join = records, rope_index, bad_key, join

    def __len__(self):
        return len(self.records)

    def __getitem__(self, row: list[int]) -> dict:
        return self.__getitems__([row])[0]

    def __getitems__(self, rows: list[list[int]]) -> list[dict]:
        """A micro-batch of rows: their records drawn at once (one processor call where the records'
        dataset encodes a micro-batch together: train/feed.py's EncodedDataset)."""
        flat = [i for row in rows for i in row]
        many = getattr(self.records, "__getitems__", None)
        items = many(flat) if many is not None else [self.records[i] for i in flat]
        if self.join:
            return [self._pack(items)]
        out, at = [], 0
        for row in rows:
            out.append(self._pack(items[at:at + len(row)]))
            at += len(row)
        return out

    def _pack(self, items: list[dict]) -> dict:
        bad = [it[self.bad_key] for it in items if self.bad_key is not None and self.bad_key in it]
        good = [it for it in items if self.bad_key is None or self.bad_key not in it]
        out = pack_row(good, self.rope_index) if good else {}
        if bad:
            out[self.bad_key] = bad
        return out
