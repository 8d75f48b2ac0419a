"""The start-up check of the training records, run beside training (data.startup_scan: background).

Why: the check measures every record (`Encoder.measure`, ~0.25 ms a record on this 2-core CPU), ~26 s
for 100k records, and step 1 needs none of it when batches are unpacked and ungrouped (their order is a
function of seed, epoch and the number of records loaded; a bad record is dropped from its micro-batch
when drawn, since encoding it finds what measuring finds). So it runs beside the loop: a thread of the
training process waits on spawned processes that do the measuring (never forked: a fork of a process
holding torch threads can deadlock; and measuring here would take the loop's GIL), or, for a small set,
measures in the thread itself. The loop polls `done()` between steps and merges the report when it is:
lengths, skip counts by reason (each bad record counted once, whether the check or a draw found it
first), the first bad record under data.on_bad_record=error. It waits for it only at the end of the run,
so summary.json always holds the full report.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from .records import Record

# A small set (data.startup_scan=background asked for explicitly) is measured in the thread: a spawned
# process's start (~3-5 s of imports) costs more than measuring it.
SPAWN_FROM = 10_000


@dataclass
class CheckReport:
    """What the check found, by index in the records the loop draws from (the records loaded)."""

    records: int  # records checked (all the records loaded)
    lengths: dict[int, dict] = field(default_factory=dict)  # index -> token counts of a good record
    bad: dict[int, tuple[str, str, str, str | None]] = field(default_factory=dict)  # index -> (source, reason, what, fix)
    error: Exception | None = None  # data.on_bad_record=error: the first bad record, in record order
    seconds: float = 0.0
    processes: int = 0  # spawned processes (0: measured in the thread)

    def kept_lengths(self) -> list[dict]:
        return [self.lengths[i] for i in sorted(self.lengths)]


class BackgroundScan:
    """`start()` the check of `records`; `done()` polls; `wait()` blocks and returns the CheckReport.

    `hold` (a threading.Event, or None): the check starts measuring only once it is set. Tests use it to
    prove the loop's first step does not wait for the check, without timing anything."""

    def __init__(self, records: list[Record], encoder, on_bad: str, processes: int, hold=None):
        self.records, self.encoder, self.on_bad = records, encoder, on_bad
        self.processes = processes if len(records) >= SPAWN_FROM else 0
        self.hold = hold
        self.waited_at_step: int | None = None  # the step the loop had to block at for it (None: never)
        self._report: CheckReport | None = None
        self._failure: BaseException | None = None  # the check itself broke (not a bad record)
        self._done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mmtune-startup-check", daemon=True)

    def start(self) -> BackgroundScan:
        self._thread.start()
        return self

    def done(self) -> bool:
        return self._done.is_set()

    def cancel(self) -> None:
        """The run ended before the check (an error, a signal): stop it and its processes."""
        self._stop.set()
        if self.hold is not None:
            self.hold.set()

    def wait_for(self, seconds: float) -> bool:
        """Block at most `seconds`; whether the check is done."""
        return self._done.wait(seconds)

    def wait(self) -> CheckReport:
        self._done.wait()
        if self._failure is not None:
            raise self._failure
        return self._report

    def _run(self) -> None:
        try:
            if self.hold is not None:
                self.hold.wait()
            t = time.perf_counter()
            self._report = check(self.records, self.encoder, self.on_bad, self.processes, self._stop)
            if self._report is None:
                raise RuntimeError("the start-up check was cancelled")
            self._report.seconds = round(time.perf_counter() - t, 2)
        except BaseException as e:  # surfaced by wait(), in the loop's thread
            self._failure = e
        finally:
            self._done.set()


def check(records: list[Record], encoder, on_bad: str, processes: int = 0, stop=None) -> CheckReport | None:
    """Measure each distinct record once (a mixture repeats records) and give every index its verdict:
    the same checks, lengths and first error, in record order, as the check before step 1
    (`inspect.scan_records(encode=False)`). None when `stop` was set first."""
    from .encode_cache import key
    from .parallel_measure import as_exception, measure_distinct

    # processes == 0: measured in this thread; else in spawned processes only (the loop keeps this interpreter)
    verdict = measure_distinct(encoder, records, processes, here=processes == 0, stop=stop)
    if verdict is None:
        return None
    report = CheckReport(records=len(records), processes=processes)
    for i, r in enumerate(records):
        got = verdict[key(r)]
        if got[0] == "ok":
            try:
                encoder._check_length(got[1]["total"], r)
            except Exception as e:  # a BadRecord: too long
                got = ("bad", e.reason, e.what, e.where, e.fix)
        if got[0] == "ok":
            report.lengths[i] = got[1]
            continue
        if got[0] == "error" or on_bad == "error":  # a DataError is never skipped; "error" stops at the first
            e = as_exception(got)
            report.error = e.as_error() if hasattr(e, "as_error") else e
            break
        report.bad[i] = (r.source, got[1], got[2], got[4])
    return report
