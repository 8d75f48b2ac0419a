"""Helpers shared by the planner tests."""

from __future__ import annotations


def canonical_events(events):
    """Runs of consecutive frees sorted: a graph torn down at once frees its storages in an order that
    varies from run to run (even between two slow traces), and frees with no allocation between them
    commute for every figure (live bytes, the allocator model's blocks at the next allocation).
    `events`: (serial, nbytes, ...) tuples, a free having nbytes < 0."""
    out, run = [], []
    for e in events:
        if e[1] < 0:
            run.append(e)
            continue
        out += sorted(run)
        run = []
        out.append(e)
    return out + sorted(run)
