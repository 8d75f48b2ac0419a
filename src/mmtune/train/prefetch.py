"""The next step's micro-batches prepared in a background thread while this step computes.

Why: with train.num_workers=0 a micro-batch's encoding (chat template, tokenizer / processor, collation)
ran on the step's critical path, between one optimizer step and the next. The tokenizer's and the image
processor's heavy parts release the GIL, so on a machine with a core to spare a thread keeps them off it at
the cost of one step's micro-batches held ahead (what a DataLoader worker's prefetch would hold, without
a second process and its copy of torch). Where no core is spare beside the whole step, the thread encodes only
during the step's backward and while the loop waits for its micro-batch (`in_backward`, `open_window`): torch's
backward runs its kernels without the GIL and takes it only to free the tensors Python saw (each saved activation's
Python object), where the forward takes it back after every op; beside the forward a thread only takes turns with
the step (benchmarks/backward_gil.py, docs/data.md).

With DataLoader workers on a CPU run (they hand their micro-batches over by value, data/workers.py) the same
thread receives them instead: a micro-batch crosses the workers' result pipe 64 KB at a time, each piece
written only after the reader took the last one and only when the worker's own GIL lets its feeder thread
run, so reading it on the loop's path made the loop wait on every piece (decided in
`resolve.data_loading.decide_prefetch`).

Order and content do not change: one thread calls the same loader iterator in the same order, so the loop
gets the same micro-batches as it would calling it itself; encoding draws from no global RNG. The loader
reads its own copy of the sampler's stream, so the resume position (the loop's cursor) still advances only
as micro-batches are consumed. The processor is not thread-safe: `settle()` waits for the thread's work
before anything else in the process uses it (evaluation, checkpoints, the end of the run), and no new work
is queued until the loop takes its next micro-batch.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager


class Prefetched:
    """An iterator over `it` that keeps `depth` items being prepared in one background thread. `in_backward`: the
    thread starts an item only while a window is open: the step's backward (`open_window` around it: torch's kernels
    run without the GIL, which the backward takes only to free the tensors Python saw) or the loop waiting for that
    item. Beside the forward, which takes the GIL back after each of its many small ops, a thread only takes turns
    with it (docs/data.md)."""

    def __init__(self, it, depth: int, in_backward: bool = False):
        self.it, self.depth, self.in_backward = it, depth, in_backward
        self.pending: deque = deque()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mmtune-prefetch")
        self.window = threading.Event()
        if not in_backward:
            self.window.set()  # always open

    def __iter__(self):
        return self

    def __next__(self):
        if not self.pending:
            item = next(self.it)
        else:
            f = self.pending.popleft()
            with self.open_window():  # the loop waits for this item anyway: the thread may work now
                item = f.result()
        self.fill()
        return item

    def _next_in_window(self):
        self.window.wait()
        return next(self.it)

    def fill(self) -> None:
        while len(self.pending) < self.depth:
            self.pending.append(self.pool.submit(self._next_in_window))

    @contextmanager
    def open_window(self):
        """While the block runs, the thread may start items (a no-op where it always may)."""
        if not self.in_backward:
            yield
            return
        self.window.set()
        try:
            yield
        finally:
            self.window.clear()

    def settle(self) -> None:
        """Wait until the thread is idle (its results stay queued): the processor is free for the caller."""
        with self.open_window():
            for f in self.pending:
                f.exception()

    def close(self) -> None:
        self.settle()
        self.pool.shutdown(wait=True)
