"""A model of PyTorch's CUDA caching allocator, replayed over the traced allocation/free events.

Rules (c10/cuda/CUDACachingAllocator.cpp, default settings):
- every request rounds up to a multiple of 512 B;
- requests <= 1 MiB come from the small pool, carved out of 2 MiB segments;
- larger requests come from the large pool; a new segment is 20 MiB for requests under 10 MiB and
  the request rounded up to 2 MiB otherwise;
- a free block is chosen best-fit (smallest that fits) within its pool; the remainder is split off
  when it is >= 512 B (small pool) or > 1 MiB (large pool), else the whole block is handed out;
- freed blocks merge with free neighbours of the same segment; segments are kept (cached), except
  that when a new segment would exceed the GPU, every fully free segment is released first (what the
  allocator does before raising out-of-memory).
`allocated` counts block sizes (so rounding and unsplit remainders count, as in
`torch.cuda.memory_allocated`); `reserved` counts segments (`memory_reserved`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

KB512 = 512
SMALL = 1 << 20
SMALL_SEGMENT = 2 << 20
LARGE_SEGMENT = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


def round_size(n: int) -> int:
    return KB512 if n < KB512 else (n + KB512 - 1) // KB512 * KB512


def segment_size(n: int) -> int:
    if n <= SMALL:
        return SMALL_SEGMENT
    if n < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return (n + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE


class _Block:
    __slots__ = ("seg", "offset", "size", "free", "prev", "next", "small")

    def __init__(self, seg, offset, size, small):
        self.seg, self.offset, self.size, self.free, self.small = seg, offset, size, True, small
        self.prev = self.next = None


@dataclass
class AllocatorPeak:
    peak_allocated: int
    peak_reserved: int
    segments: int


class CachingAllocatorModel:
    def __init__(self, capacity: int | None = None):
        self.capacity = capacity
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self._free = {True: [], False: []}  # pool (small?) -> sorted [(size, seg, offset, id)]
        self._blocks: dict[int, _Block] = {}
        self._live: dict[int, _Block] = {}  # serial -> block
        self._segments: dict[int, _Block] = {}  # seg -> first block
        self._seg_size: dict[int, int] = {}
        self._next_seg = 0

    def _key(self, b):
        return (b.size, b.seg, b.offset, id(b))

    def _add_free(self, b):
        b.free = True
        self._blocks[id(b)] = b
        bisect.insort(self._free[b.small], self._key(b))

    def _remove_free(self, b):
        lst = self._free[b.small]
        i = bisect.bisect_left(lst, self._key(b))
        del lst[i]

    def _new_segment(self, size: int, small: bool) -> _Block:
        if self.capacity is not None and self.reserved + size > self.capacity:
            self._release_free_segments()
        seg = self._next_seg
        self._next_seg += 1
        b = _Block(seg, 0, size, small)
        self._segments[seg] = b
        self._seg_size[seg] = size
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return b

    def _release_free_segments(self):
        for seg, first in list(self._segments.items()):
            if first.free and first.next is None and first.prev is None:
                self._remove_free(first)
                self.reserved -= self._seg_size.pop(seg)
                del self._segments[seg]

    def malloc(self, serial: int, nbytes: int) -> None:
        size = round_size(nbytes)
        small = size <= SMALL
        lst = self._free[small]
        i = bisect.bisect_left(lst, (size, -1, -1, -1))
        if i < len(lst):
            key = lst.pop(i)
            b = self._blocks[key[3]]
        else:
            b = self._new_segment(segment_size(size), small)
        remaining = b.size - size
        if (small and remaining >= KB512) or (not small and remaining > SMALL):
            rest = _Block(b.seg, b.offset + size, remaining, small)
            rest.prev, rest.next = b, b.next
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            b.size = size
            self._add_free(rest)
        b.free = False
        self._live[serial] = b
        self.allocated += b.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, serial: int) -> None:
        b = self._live.pop(serial, None)
        if b is None:
            return
        self.allocated -= b.size
        for nb in (b.prev, b.next):
            if nb is not None and nb.free:
                self._remove_free(nb)
                if nb is b.prev:
                    nb.size += b.size
                    nb.next = b.next
                    if b.next is not None:
                        b.next.prev = nb
                    if self._segments.get(b.seg) is b:
                        self._segments[b.seg] = nb
                    b = nb
                else:
                    b.size += nb.size
                    b.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = b
        self._add_free(b)


def replay(events, capacity: int | None = None) -> AllocatorPeak:
    """Peak allocated / reserved of the traced events through the caching allocator model."""
    m = CachingAllocatorModel(capacity)
    for ev in events:
        if ev.nbytes > 0:
            if ev.nbytes:
                m.malloc(ev.serial, ev.nbytes)
        else:
            m.free(ev.serial)
    return AllocatorPeak(m.peak_allocated, m.peak_reserved, len(m._segments))
