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

With `expandable_segments:True` (mmtune's default, resolve/decisions.decide_cuda_allocator) the same
file's expandable path applies instead (`ExpandableAllocatorModel`): each pool is one segment of reserved
address space, mapped in pages of 2 MiB (small pool) or 20 MiB (large pool); a request no free block fits
maps pages at the segment's end, merged with a free block there; every remainder of >= 512 B is split
off (both pools); before exceeding the GPU, free whole pages at a segment's end are unmapped. Not
modelled: unmapping free pages inside a segment (torch does it on out-of-memory and empty_cache).
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

    def _fresh_block(self, size: int, small: bool) -> _Block:
        """A free block of at least `size` when no cached one fits: a new segment."""
        return self._new_segment(segment_size(size), small)

    @staticmethod
    def _should_split(small: bool, remaining: int) -> bool:
        return remaining >= KB512 if small else remaining > SMALL

    def malloc(self, serial: int, nbytes: int) -> None:
        size = round_size(nbytes)
        small = size <= SMALL
        lst = self._free[small]
        i = bisect.bisect_left(lst, (size, -1, -1, -1))
        if i < len(lst):
            key = lst.pop(i)
            b = self._blocks[key[3]]
        else:
            b = self._fresh_block(size, small)
        remaining = b.size - size
        if self._should_split(small, remaining):
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

    def apply(self, events) -> None:
        """Replay traced events (nbytes > 0: an allocation, < 0: a free) from the model's current state."""
        for ev in events:
            if ev.nbytes > 0:
                self.malloc(ev.serial, ev.nbytes)
            else:
                self.free(ev.serial)

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


class ExpandableAllocatorModel(CachingAllocatorModel):
    """The caching allocator under `expandable_segments:True` (module docstring): one growing segment per
    pool, so a request no cached block fits extends the segment's end instead of adding a segment."""

    def _fresh_block(self, size: int, small: bool) -> _Block:
        page = SMALL_SEGMENT if small else LARGE_SEGMENT
        seg = 0 if small else 1
        last = self._last_block(seg)
        tail_free = last.size if last is not None and last.free else 0
        grow = -(-(size - tail_free) // page) * page
        if self.capacity is not None and self.reserved + grow > self.capacity:
            self._unmap_free_ends()
            last = self._last_block(seg)
            tail_free = last.size if last is not None and last.free else 0
            grow = -(-(size - tail_free) // page) * page
        self.reserved += grow
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self._seg_size[seg] = self._seg_size.get(seg, 0) + grow
        if tail_free:
            self._remove_free(last)
            last.size += grow
            return last
        b = _Block(seg, self._seg_size[seg] - grow, grow, small)
        if last is None:
            self._segments[seg] = b
        else:
            last.next, b.prev = b, last
        return b

    @staticmethod
    def _should_split(small: bool, remaining: int) -> bool:
        return remaining >= KB512

    def _last_block(self, seg: int) -> _Block | None:
        b = self._segments.get(seg)
        while b is not None and b.next is not None:
            b = b.next
        return b

    def _unmap_free_ends(self) -> None:
        """Unmap the whole free pages at each segment's end (torch releases cached memory before failing)."""
        for seg, page in ((0, SMALL_SEGMENT), (1, LARGE_SEGMENT)):
            last = self._last_block(seg)
            if last is None or not last.free:
                continue
            keep = -(-last.offset // page) * page - last.offset  # up to the first page boundary in the block
            cut = last.size - keep if keep < last.size else 0
            if cut <= 0:
                continue
            self._remove_free(last)
            last.size -= cut
            self._seg_size[seg] -= cut
            self.reserved -= cut
            if last.size:
                self._add_free(last)
            elif last.prev is not None:
                last.prev.next = None
            else:
                del self._segments[seg]


def replay(events, capacity: int | None = None, *, expandable: bool = False) -> AllocatorPeak:
    """Peak allocated / reserved of the traced events through the caching allocator model (`expandable`:
    under expandable_segments:True)."""
    m = (ExpandableAllocatorModel if expandable else CachingAllocatorModel)(capacity)
    m.apply(events)
    return AllocatorPeak(m.peak_allocated, m.peak_reserved, len(m._segments))
