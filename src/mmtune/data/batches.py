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
                           world_size: int = 1) -> list[list[int]]:
    """Index lists for this rank's micro-batches in one epoch; the ragged tail is dropped so every
    rank does the same number of steps (the dropped records come first in the next epoch's shuffle)."""
    order = epoch_order(n, seed, epoch)
    per_rank = len(order) // world_size
    mine = order[rank * per_rank:(rank + 1) * per_rank] if world_size > 1 else order
    usable = (len(mine) // micro_batch_size) * micro_batch_size
    return [mine[i:i + micro_batch_size] for i in range(0, usable, micro_batch_size)]


class BatchStream:
    """Endless micro-batches of record indices, epoch after epoch, resumable from (epoch, index)."""

    def __init__(self, n: int, *, seed: int, micro_batch_size: int, rank: int = 0, world_size: int = 1,
                 epoch: int = 0, index: int = 0):
        if n // world_size < micro_batch_size:
            from ..errors import ConfigError

            raise ConfigError(
                f"the training set has {n} records, fewer than one micro-batch per process "
                f"({micro_batch_size} x {world_size})", where="train.micro_batch_size",
                fix=f"train.micro_batch_size={max(1, n // world_size)} or add data")
        self.n, self.seed, self.mbs, self.rank, self.world = n, seed, micro_batch_size, rank, world_size
        self.epoch, self.index = epoch, index
        self._batches = self._epoch_batches()

    def _epoch_batches(self):
        return micro_batches_of_epoch(self.n, seed=self.seed, epoch=self.epoch, micro_batch_size=self.mbs,
                                      rank=self.rank, world_size=self.world)

    def next(self) -> list[int]:
        if self.index >= len(self._batches):
            self.epoch, self.index = self.epoch + 1, 0
            self._batches = self._epoch_batches()
        batch = self._batches[self.index]
        self.index += 1
        return batch

    def position(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}
