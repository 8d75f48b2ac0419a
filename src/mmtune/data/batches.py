"""Which records go into which micro-batch: a pure function of (seed, epoch, position).

Resume restores the position (epoch, micro-batch index) and gets the identical continuation;
no sampler state needs saving. Each rank takes every world_size-th record of the epoch order.
"""

from __future__ import annotations

import random


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def micro_batches_of_epoch(n: int, *, seed: int, epoch: int, micro_batch_size: int, rank: int = 0,
                           world_size: int = 1, lengths: list[int] | None = None, pack: int | None = None) -> list:
    """Index lists for this rank's micro-batches in one epoch; the ragged tail is dropped so every
    rank does the same number of steps (the dropped records come first in the next epoch's shuffle).
    With `lengths` (data.group_by_length) the batches hold records of similar length: see grouped_batches.
    With `pack` (data.packing: the row capacity, data.max_length) each micro-batch is a list of rows, each
    a list of record indices: see data/packing.py."""
    order = epoch_order(n, seed, epoch)
    if pack is not None:
        from .packing import packed_micro_batches

        return packed_micro_batches(order, lengths, seed=seed, epoch=epoch, micro_batch_size=micro_batch_size,
                                    capacity=pack, rank=rank, world_size=world_size)
    if lengths is not None:
        return grouped_batches(order, lengths, seed=seed, epoch=epoch, micro_batch_size=micro_batch_size,
                               rank=rank, world_size=world_size)
    per_rank = len(order) // world_size
    mine = order[rank * per_rank:(rank + 1) * per_rank] if world_size > 1 else order
    usable = (len(mine) // micro_batch_size) * micro_batch_size
    return [mine[i:i + micro_batch_size] for i in range(0, usable, micro_batch_size)]


GROUP_WINDOW = 64  # global batches per sorted window: wide enough to cut padding, narrow enough to stay random


def grouped_batches(order: list[int], lengths: list[int], *, seed: int, epoch: int, micro_batch_size: int,
                    rank: int = 0, world_size: int = 1) -> list[list[int]]:
    """Length-grouped micro-batches from the epoch's shuffled order, the same way on every rank.

    The order is cut into windows of GROUP_WINDOW global batches (micro_batch_size x world_size records);
    each window is sorted by length (ties by index) and cut into global batches, so the records of a
    step -- on every rank -- have similar lengths and little padding; the batches are then shuffled by
    (seed, epoch), with the one holding the longest record first (an out-of-memory shows at step 1,
    not hours in). Each rank takes its slice of every global batch. As many batches per rank as
    ungrouped, and a pure function of (seed, epoch, lengths): resume needs no extra state."""
    g = micro_batch_size * world_size
    usable = (len(order) // g) * g
    batches: list[list[int]] = []
    for s in range(0, usable, GROUP_WINDOW * g):
        window = sorted(order[s:min(usable, s + GROUP_WINDOW * g)], key=lambda i: (-lengths[i], i))
        batches += [window[j:j + g] for j in range(0, len(window), g)]
    random.Random(f"group:{seed}:{epoch}").shuffle(batches)
    if batches:
        first = max(range(len(batches)), key=lambda b: (max(lengths[i] for i in batches[b]), -b))
        batches.insert(0, batches.pop(first))
    return [b[rank * micro_batch_size:(rank + 1) * micro_batch_size] for b in batches]


class BatchStream:
    """Endless micro-batches of record indices, epoch after epoch, resumable from (epoch, index)."""

    def __init__(self, n: int, *, seed: int, micro_batch_size: int, rank: int = 0, world_size: int = 1,
                 epoch: int = 0, index: int = 0, lengths: list[int] | None = None, pack: int | None = None):
        if n // world_size < micro_batch_size:
            from ..errors import ConfigError

            raise ConfigError(
                f"the training set has {n} records, fewer than one micro-batch per process "
                f"({micro_batch_size} x {world_size})", where="train.micro_batch_size",
                fix=f"train.micro_batch_size={max(1, n // world_size)} or add data")
        self.n, self.seed, self.mbs, self.rank, self.world = n, seed, micro_batch_size, rank, world_size
        self.epoch, self.index, self.lengths, self.pack = epoch, index, lengths, pack
        self._batches = self._epoch_batches()
        if not self._batches:  # packed: fewer full rows than one micro-batch on every process
            from ..errors import ConfigError

            raise ConfigError(
                f"the training set's {n} records pack into fewer rows of {pack} tokens than one micro-batch per "
                f"process ({micro_batch_size} x {world_size})", where="train.micro_batch_size",
                fix="lower train.micro_batch_size or data.max_length, or add data")

    def _epoch_batches(self):
        return micro_batches_of_epoch(self.n, seed=self.seed, epoch=self.epoch, micro_batch_size=self.mbs,
                                      rank=self.rank, world_size=self.world, lengths=self.lengths, pack=self.pack)

    def next(self) -> list[int]:
        if self.index >= len(self._batches):
            self.epoch, self.index = self.epoch + 1, 0
            self._batches = self._epoch_batches()
        batch = self._batches[self.index]
        self.index += 1
        return batch

    def position(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}
