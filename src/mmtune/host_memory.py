"""This machine's RAM: total and available, for the checks and the planner that size what they hold in it."""

from __future__ import annotations


def host_ram_bytes() -> tuple[int, int | None]:
    """(total, available) RAM of this machine; available from /proc/meminfo where there is one."""
    import os

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return total, int(line.split()[1]) * 1024
    except OSError:
        pass
    return total, None
