"""`Encoder.measure` over many records in spawned processes, results in record order.

Why: training's start-up scan measures every record (media headers, token arithmetic, the chat template
and tokenizer: ~0.25-0.5 ms a record on this 2-core CPU), serially ~25-50 s for 100k records. The work
is per record and independent, so it splits over processes. Spawned (never forked: a fork of a process
holding torch threads can deadlock), each worker unpickles the run's Encoder (~15 KB: tokenizer and
processor settings) and measures a contiguous slice; this process measures the first slice meanwhile.
A worker costs its interpreter start and imports (~3-5 s here), so processes are used only past
RECORDS_PER_PROCESS records each (`processes_for`). Results come back as plain tuples, in order, so the
scan that reads them keeps its order, its skip counts and its first error exactly as a serial scan.
"""

from __future__ import annotations

import os

# A worker pays its start (~3-5 s of imports) back after about this many records at ~0.3 ms each.
RECORDS_PER_PROCESS = 40_000

_ENCODER = None  # the worker's own Encoder (set once by _init)
# Workers of the check beside training run at a lower priority: where cores are short (this shared 2-core
# machine) the training step, which is the critical path, gets the CPU first; idle cores are used all the same.
BACKGROUND_NICE = 10


def _cpus() -> int:
    """The CPUs this process may run on (a container's CPU quota counted: cores.py)."""
    from ..cores import usable_cores

    return usable_cores()[0]


def processes_for(n_records: int, cpus: int | None = None) -> int:
    """How many processes measure `n_records`: one per RECORDS_PER_PROCESS records, at most one per CPU."""
    cpus = _cpus() if cpus is None else cpus
    return max(1, min(cpus, n_records // RECORDS_PER_PROCESS))


def background_processes(n_records: int, cpus: int | None = None) -> int:
    """Spawned processes for a check that runs beside training (data/startup_scan.py): the training process
    keeps its CPU, so at most one per other CPU, at least one (the check must not take the loop's GIL), and
    one per RECORDS_PER_PROCESS records beyond that."""
    cpus = _cpus() if cpus is None else cpus
    return max(1, min(cpus - 1, n_records // RECORDS_PER_PROCESS))


def measure_one(encoder, record) -> tuple:
    """("ok", counts) or ("bad", reason, what, where, fix) or ("error", what, where, fix): picklable."""
    from ..errors import DataError
    from .formats import BadRecord

    try:
        return ("ok", encoder.measure(record))
    except BadRecord as e:
        return ("bad", e.reason, e.what, e.where, e.fix)
    except DataError as e:
        return ("error", e.what, e.where, e.fix)


def as_exception(result: tuple):
    from ..errors import DataError
    from .formats import BadRecord

    if result[0] == "bad":
        return BadRecord(*result[1:])
    return DataError(*result[1:])


def _init(encoder_bytes: bytes, nice: int = 0) -> None:
    import pickle

    global _ENCODER
    if nice and hasattr(os, "nice"):  # the check beside training yields the CPU to the loop on a busy machine
        os.nice(nice)
    _ENCODER = pickle.loads(encoder_bytes)


def _measure_slice(records: list) -> list:
    return [measure_one(_ENCODER, r) for r in records]


def measure_distinct(encoder, records: list, processes: int, advance=None, here: bool = True,
                     stop=None) -> dict | None:
    """measure_records over the distinct records (a mixture repeats records: each measured once), by
    encode_cache.key; None when `stop` was set first. Shared by the check before step 1
    (inspect.scan_records) and the one beside training (startup_scan.check)."""
    from .encode_cache import key

    distinct = list({key(r): r for r in records}.values())
    results = measure_records(encoder, distinct, processes, advance, here=here, stop=stop)
    return None if results is None else dict(zip(map(key, distinct), results))


def measure_records(encoder, records: list, processes: int, advance=None, here: bool = True, stop=None) -> list:
    """measure_one for each record, in order; `processes` - 1 spawned workers plus this process, or with
    `here=False` `processes` spawned workers and none of the measuring in this process (the check beside
    training: the training process's interpreter is the loop's); `stop` (a threading.Event) ends it
    early: the pieces not started are cancelled and None is returned."""
    if not here and records:
        return _measure_spawned(encoder, records, processes, advance, stop)
    if processes <= 1 or len(records) < 2:
        out = []
        for r in records:
            if stop is not None and stop.is_set():
                return None
            out.append(measure_one(encoder, r))
            if advance:
                advance()
        return out
    import multiprocessing as mp
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    per = -(-len(records) // processes)
    slices = [records[i:i + per] for i in range(0, len(records), per)]
    # Several pieces per worker slice: results stream back as they finish, for the progress bar.
    pieces = [s[j:j + 2000] for s in slices[1:] for j in range(0, len(s), 2000)]
    with ProcessPoolExecutor(max_workers=processes - 1, mp_context=mp.get_context("spawn"),
                             initializer=_init, initargs=(pickle.dumps(encoder),)) as pool:
        futures = [pool.submit(_measure_slice, p) for p in pieces]
        out = measure_records(encoder, slices[0], 1, advance)  # this process's slice, meanwhile
        for f, p in zip(futures, pieces):
            out.extend(f.result())
            if advance:
                for _ in p:
                    advance()
    return out


def _measure_spawned(encoder, records: list, processes: int, advance=None, stop=None) -> list | None:
    import multiprocessing as mp
    import pickle
    from concurrent.futures import ProcessPoolExecutor, wait

    pieces = [records[j:j + 2000] for j in range(0, len(records), 2000)]
    out: list = []
    with ProcessPoolExecutor(max_workers=max(1, processes), mp_context=mp.get_context("spawn"),
                             initializer=_init, initargs=(pickle.dumps(encoder), BACKGROUND_NICE)) as pool:
        futures = [pool.submit(_measure_slice, p) for p in pieces]
        for f, p in zip(futures, pieces):
            while stop is not None and not wait([f], timeout=0.2).done:
                if stop.is_set():  # the run ended first (an error, a signal): leave at once, workers included
                    pool.shutdown(wait=False, cancel_futures=True)
                    return None
            out.extend(f.result())
            if advance:
                for _ in p:
                    advance()
    return out
