"""How many cores other processes keep busy right now: what a second thread of this process would compete with.

Why not the load average: it is a one-minute moving average of runnable (and uninterruptible) tasks. It still
reads ~1 for a minute after a one-core job ends (the benchmark's previous variant, a test that just trained),
and in some virtual machines it reads ~1 on an idle machine (this project's Firecracker VMs: 0.7-1.0 with
/proc/stat counting 99.7 % idle). Both turned `train.prefetch` off where a core was in fact idle.

Measured instead over a short window from /proc/stat (all CPUs' busy time) minus this process's own CPU time
in the same window; remembered for a few seconds, since one command resolves its run more than once. Where
/proc/stat is missing (macOS, Windows), the load average as before.
"""

from __future__ import annotations

import os
import time

WINDOW_S = 0.05
REMEMBER_S = 5.0
_last: tuple[float, float, str] | None = None  # (when, cores busy elsewhere, how it was measured)


def _busy_and_total() -> tuple[int, int] | None:
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def busy_elsewhere() -> tuple[float, str]:
    """(cores other processes keep busy, how that was measured: for the decision's reason)."""
    global _last
    now = time.monotonic()
    if _last is not None and now - _last[0] < REMEMBER_S:
        return _last[1], _last[2]
    first = _busy_and_total()
    if first is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        _last = (now, load, f"load average {load:.2f}")
        return _last[1], _last[2]
    own, t = os.times(), time.monotonic()
    time.sleep(WINDOW_S)
    second, own2, elapsed = _busy_and_total(), os.times(), time.monotonic() - t
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    busy_s = (second[0] - first[0]) / ticks
    own_s = (own2.user + own2.system) - (own.user + own.system)
    cores = max(0.0, (busy_s - own_s) / max(elapsed, 1e-6))
    _last = (time.monotonic(), cores, f"{cores:.2f} cores busy elsewhere (/proc/stat over {WINDOW_S * 1000:.0f} ms)")
    return _last[1], _last[2]
