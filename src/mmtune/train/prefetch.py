"""The next step's micro-batches prepared in a background thread while this step computes.

Why: with train.num_workers=0 a micro-batch's encoding (chat template, tokenizer / processor, collation)
ran on the step's critical path, between one optimizer step and the next. The tokenizer's and the image
processor's heavy parts release the GIL, so on a machine with a core to spare a thread keeps them off it at
the cost of one step's micro-batches held ahead (what a DataLoader worker's prefetch would hold, without
a second process and its copy of torch).

With DataLoader workers on a CPU run (they hand their micro-batches over by value, data/workers.py) the same
thread receives them instead: a micro-batch crosses the workers' result pipe 64 KB at a time, each piece
written only after the reader took the last one and only when the worker's own GIL lets its feeder thread
run, so reading it on the loop's path made the loop wait on every piece (decided in
`resolve.decisions.decide_prefetch`).

Order and content do not change: one thread calls the same loader iterator in the same order, so the loop
gets the same micro-batches as it would calling it itself; encoding draws from no global RNG. The loader
reads its own copy of the sampler's stream, so the resume position (the loop's cursor) still advances only
as micro-batches are consumed. The processor is not thread-safe: `settle()` waits for the thread's work
before anything else in the process uses it (evaluation, checkpoints, the end of the run), and no new work
is queued until the loop takes its next micro-batch.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor


class Prefetched:
    """An iterator over `it` that keeps `depth` items being prepared in one background thread."""

    def __init__(self, it, depth: int):
        self.it, self.depth = it, depth
        self.pending: deque = deque()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mmtune-prefetch")

    def __iter__(self):
        return self

    def __next__(self):
        item = self.pending.popleft().result() if self.pending else next(self.it)
        self.fill()
        return item

    def fill(self) -> None:
        while len(self.pending) < self.depth:
            self.pending.append(self.pool.submit(next, self.it))

    def settle(self) -> None:
        """Wait until the thread is idle (its results stay queued): the processor is free for the caller."""
        for f in self.pending:
            f.exception()

    def close(self) -> None:
        self.settle()
        self.pool.shutdown(wait=True)
