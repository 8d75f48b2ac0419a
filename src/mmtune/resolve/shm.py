"""How much of /dev/shm a CUDA run's DataLoader workers may need, and how much this machine has.

A CUDA run's workers hand each micro-batch to the training process through torch's shared memory (files in
/dev/shm), where the pin-memory thread pins them; up to num_workers x prefetch_factor micro-batches are in flight.
Docker gives a container 64 MB of /dev/shm unless run with --shm-size (Kubernetes pods likewise, WSL2 and small
cloud images often little more), and a worker that cannot grow its file dies of SIGBUS: "DataLoader worker (pid
...) is killed by signal: Bus error ... out of shared memory", or "unable to write to file </torch_...>", some
steps in, when a large micro-batch first comes. The loader decision (data_loading.py) then hands micro-batches
over by value through the workers' pipes (no /dev/shm; what CPU runs do) instead.
"""

from __future__ import annotations

# A micro-batch in flight, as the rule counts it: a few megapixel images as Qwen2-VL-style fp32 patches are
# ~25 MB each (1 Mpx -> ~5,100 patches x 1,176 values x 4 bytes), so 4 of them ~100 MB; a text micro-batch is far
# less. Generous on purpose: too small a /dev/shm kills the run, by value costs a copy through a pipe.
SHM_PER_MICRO_BATCH = 128 << 20


def shm_free_bytes(path: str = "/dev/shm") -> int | None:
    """Free bytes of /dev/shm, or None where there is none (macOS, Windows: torch uses other shared memory)."""
    import shutil

    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def shm_needed(num_workers: int, prefetch_factor: int) -> int:
    return num_workers * prefetch_factor * SHM_PER_MICRO_BATCH
