"""The start-up scan's encodings, kept for the training loop so a record is encoded once, not twice.

One cache belongs to one Encoder (one processor, its media caps, data.max_length) and one run: the
loop's dataset reads it by `key(record)` (the record's source and id; a mixture's repeated copies of a
record share one entry). It holds whole encodings -- ids, labels, masks and media tensors -- up to a
byte budget (`data.cache_mb`). Stored compactly, and given back exactly as `encode` made them for
training: integer per-token tensors as int32 when their values fit (int64 again on the way out), floating
media in the run's compute dtype when that is 16-bit (the collator casts to it anyway, so the batch is
bit-identical to one made from a fresh encoding).

Why a budget and not "measure only": on this 2-core CPU `Encoder.encode` costs ~1.4 ms for a demo
record and ~11 ms for a 640-px image, `Encoder.measure` (headers only) 0.16-0.22 ms. Records that fit
are encoded at start-up and never again (in no epoch); records past the budget are only measured at
start-up (lengths and header checks, ~50x cheaper than a throw-away encode) and encoded by the loop.
"""

from __future__ import annotations

INT32_MAX = 2**31 - 1


def key(record) -> str:
    return f"{record.source}\x00{record.id}"


class EncodeCache:
    def __init__(self, budget_bytes: int, compute_dtype=None):
        self.budget = int(budget_bytes)
        self.compute_dtype = compute_dtype
        self.nbytes = 0
        self.full = budget_bytes <= 0  # set once a record did not fit: the rest of the scan only measures
        self._items: dict[str, dict] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, k: str) -> bool:
        return k in self._items

    def put(self, k: str, encoded: dict) -> bool:
        """Keep an encoding if it fits the budget; False (and the cache is full from then on) if not."""
        if k in self._items:
            return True
        packed = {name: self._pack(v) for name, v in encoded.items()}
        size = sum(v.numel() * v.element_size() for v, _ in packed.values())
        if self.full or self.nbytes + size > self.budget:
            self.full = True
            return False
        self._items[k] = packed
        self.nbytes += size
        return True

    def _pack_all(self, encoded: dict) -> list:
        """The tensors an encoding would be stored as (to size a budget)."""
        return [self._pack(v)[0] for v in encoded.values()]

    def get(self, k: str) -> dict | None:
        packed = self._items.get(k)
        if packed is None:
            return None
        # New int64 tensors (the collator copies the rest): nothing the loop does can alter the cache.
        return {name: v.long() if narrowed else v for name, (v, narrowed) in packed.items()}

    def _pack(self, v) -> tuple:
        """(tensor as stored, whether it was narrowed from int64)."""
        import torch

        if v.dtype == torch.int64 and v.numel() and int(v.max()) <= INT32_MAX and int(v.min()) >= -INT32_MAX:
            return v.to(torch.int32), True
        # Media only (per-token tensors are 1-D): the collator casts exactly these to the compute dtype.
        if (v.is_floating_point() and v.dim() >= 2 and self.compute_dtype in (torch.bfloat16, torch.float16)):
            return v.to(self.compute_dtype), False
        return v, False
