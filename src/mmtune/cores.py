"""The CPU cores this process may use: its affinity mask, capped by a container's CPU quota.

Docker's `--cpus` and a Kubernetes CPU limit are a cgroup bandwidth quota, not an affinity mask: os.cpu_count()
and os.sched_getaffinity() still count every core of the host, and so does torch (its DataLoader's "suggested max
number of worker" included). Processes and threads sized from the host's count then take turns on the quota's
cores, throttled (https://github.com/Unity-Technologies/ml-agents/pull/4471,
https://github.com/onyx-dot-app/onyx/pull/12351). Every count of cores mmtune decides from (the prefetch thread,
the start-up check's processes, the DataLoader workers' check MM263) reads it here.
"""

from __future__ import annotations

import os

CGROUP_ROOT = "/sys/fs/cgroup"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def cpu_quota(root: str = CGROUP_ROOT) -> float | None:
    """Cores' worth of CPU time the container's cgroup allows (quota / period), or None where none is set:
    cgroup v2 `cpu.max` ("200000 100000", "max 100000" unlimited), else v1 `cpu/cpu.cfs_quota_us` (-1 unlimited)."""
    v2 = _read(os.path.join(root, "cpu.max"))
    if v2 is not None:
        parts = v2.split()
        if len(parts) == 2 and parts[0] != "max" and parts[0].isdigit() and parts[1].isdigit() and int(parts[1]):
            return int(parts[0]) / int(parts[1])
        return None
    for sub in ("cpu", "cpu,cpuacct"):
        quota, period = (_read(os.path.join(root, sub, f"cpu.cfs_{k}_us")) for k in ("quota", "period"))
        if quota and period and quota.lstrip("-").isdigit() and period.isdigit() and int(quota) > 0 and int(period):
            return int(quota) / int(period)
    return None


def usable_cores(root: str = CGROUP_ROOT) -> tuple[int, str]:
    """(cores, how they were counted): the affinity mask's cores, or fewer where a CPU quota caps them (rounded
    down, at least 1: one thread more than the quota runs is throttled)."""
    visible = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cpu_quota(root)
    if quota is not None and quota < visible:
        n = max(1, int(quota))
        return n, f"{n} core(s): a CPU quota of {quota:g} cores (the container's cgroup) of the {visible} visible"
    return visible, f"{visible} core(s)"
