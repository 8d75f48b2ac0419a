"""The run's data-loading decisions: when the check of every training record runs (before step 1 or beside
training), how DataLoader workers start and feed the loop, and whether a thread prepares the next step's
micro-batches. Each is a pure function of (config, target, this machine's cores and load), returned with a
`Decision` saying why, like every other decision of the resolved run (resolve/decisions.py).
"""

from __future__ import annotations

from .decisions import Decision

# --------------------------------------------------------------------------- start-up check

# Past this many records the start-up check runs beside training: measuring them takes ~2.5 s of CPU here
# (~0.25 ms a record), about what a spawned process's start costs, so below it waiting is as quick.
BACKGROUND_SCAN_FROM = 10_000


def decide_startup_scan(data_cfg, n_records: int, processes: int) -> tuple[str, Decision]:
    """("before" | "background", decision): whether step 1 waits for the check of every training record.

    What step 1 needs from the check decides it. Unpacked, ungrouped batches are a pure function of
    (seed, epoch, the number of records loaded): a bad record is dropped from its micro-batch when it is
    drawn (each drawn record is encoded, and encoding finds everything measuring finds), so nothing before
    step 1 depends on the check, and its report (lengths, skip counts, first error) can come later.
    Packing and length grouping build batches from every record's length, a stream checks only a
    sample, and several processes would each have to stop at the same step on a bad record: these wait."""
    key, asked = "data.startup_scan", data_cfg.startup_scan
    needs = ("data.packing" if data_cfg.packing else "data.group_by_length" if data_cfg.group_by_length
             else "data.streaming" if data_cfg.streaming else None)
    if asked == "before" or (asked == "auto" and needs):
        why = "requested" if asked == "before" else f"{needs} builds step 1's batches from the check"
        return "before", Decision(key, "before step 1", why)
    if processes > 1:
        return "before", Decision(key, "before step 1", f"{processes} processes: every rank must stop at the same "
                                  "step on a bad record, which a check beside training cannot promise yet",
                                  changed=asked == "background")
    if asked == "auto" and n_records < BACKGROUND_SCAN_FROM:
        return "before", Decision(key, "before step 1", f"{n_records:,} records (< {BACKGROUND_SCAN_FROM:,}): "
                                  "checked in seconds")
    return "background", Decision(
        key, "beside training", ("requested" if asked == "background" else f"{n_records:,} records (>= "
                                 f"{BACKGROUND_SCAN_FROM:,})") + ": step 1 does not wait; batches hold the records "
        "loaded, a bad one is dropped from its micro-batch when drawn; the check's report (lengths, skip counts) "
        "is logged and goes to summary.json when it completes, and under data.on_bad_record=error its first bad "
        "record stops the run at the next step")


# --------------------------------------------------------------------------- data loader workers

def decide_prefetch(cfg, loader, target, *, cores: int | None = None, load: float | None = None,
                    torch_threads: int | None = None):
    """(LoaderPlan, Decision or None): train.prefetch -- whether a background thread prepares the next
    step's micro-batches (train/prefetch.py), or, for workers that hand over by value, receives them. None
    where it cannot apply (a CUDA run's workers: torch's pin-memory thread receives them; a stream's cursor
    encodes as it reads). `cores`, `load` (1-minute load average) and `torch_threads` default to this
    machine's."""
    import dataclasses

    if (loader.num_workers and not loader.by_value) or cfg.data.streaming:
        return loader, None
    key = "train.prefetch"
    if cfg.train.prefetch == "none":
        return loader, Decision(key, "none", "requested: each micro-batch is encoded (or received from a worker) "
                                             "when the loop asks for it")
    depth = cfg.train.grad_accum
    if loader.num_workers:  # workers encode; what is left for this process is reading their micro-batches
        value = f"a background thread receives the workers' micro-batches, {depth} (one step) ahead"
        reason = ("auto: a worker's micro-batch (~1.2 MB for 4 of the image twin's records) crosses a 64 KB pipe "
                  "in pieces, each written only when this process has read the last and the worker's GIL lets it; "
                  "read by the loop, the image twin waited 19 % of its step for data, read by a thread while the "
                  "step computes 0.6 % (docs/data.md). The thread only unpickles arrays: it never uses the processor")
    elif cfg.train.objective == "grpo":
        return loader, Decision(key, "none", "train.objective=grpo: its step samples and decodes with the processor, "
                                             "which a second thread must not use at the same time", changed=True)
    else:
        beyond_torch, busy, why = _cores_beside_step(target, cores, load, torch_threads)
        if beyond_torch < 1:
            return loader, Decision(key, "none", f"auto: {why}: no core beside the step's own threads, a second "
                                                 "thread would only take turns with the step", changed=True)
        if beyond_torch - busy < 1:  # a core beyond torch's threads, but the load (this run's own step counts) fills it
            value = f"a background thread that encodes during the step's backward, {depth} micro-batch(es) (one step) ahead"
            reason = (f"auto: {why}: no core to spare beside the whole step; beside the forward, which takes Python's "
                      "GIL back after each of its many small ops, a thread only takes turns with it, while torch's "
                      "backward runs its kernels without the GIL and takes it only to free the tensors Python saw, so "
                      "the next step's encoding runs there (and while the loop waits for it); same batches, same "
                      "order (docs/data.md)")
            return (dataclasses.replace(loader, thread_prefetch=depth, thread_in_backward=True),
                    Decision(key, value, reason, changed=True))
        value = f"a background thread, {depth} micro-batch(es) (one step) ahead"
        reason = (f"auto: {why}: the next step's encoding (tokenizer, processor, collation) overlaps this step "
                  "instead of preceding it; same batches, same order; it waits before evaluation and checkpoints "
                  "(the processor is not shared across threads)")
    return dataclasses.replace(loader, thread_prefetch=depth), Decision(key, value, reason, changed=True)


def _cores_beside_step(target, cores, load, torch_threads) -> tuple[float, float, str]:
    """(cores beyond the step's own threads, the load already on them, how that was counted); None arguments
    are this machine's."""
    import os

    if cores is None:
        from ..cores import usable_cores

        cores = usable_cores()[0]  # a container's CPU quota counted
    if target.device == "cuda":  # the step's thread mostly waits for the GPU: a thread beside it has a core
        return cores - 1, 0.0, f"{cores} cores, the step on the GPU"
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if torch_threads is None:
        import torch

        torch_threads = torch.get_num_threads()
    return cores - torch_threads, load, f"{cores} cores, {torch_threads} torch thread(s), load average {load:.2f}"


def decide_loader(cfg, target, *, shm_free: int | None = -1):
    """(LoaderPlan, Decision or None): how train.num_workers DataLoader workers start and feed the loop.
    None with 0 workers, or under data.streaming (records are read in the training process). `shm_free`:
    free bytes of /dev/shm where the run executes (-1: this machine's, measured for a local CUDA run)."""
    import dataclasses

    from ..data.workers import LoaderPlan, has_forkserver
    from .shm import shm_free_bytes, shm_needed

    n = cfg.train.num_workers
    if n == 0 or cfg.data.streaming:
        return LoaderPlan(), None
    method = "forkserver" if has_forkserver() else "spawn"
    cuda = target.device == "cuda"
    plan = LoaderPlan(num_workers=n, start_method=method, persistent=True, prefetch_factor=2, pin_memory=cuda)
    if cuda and target.local and shm_free == -1:
        shm_free = shm_free_bytes()
    small_shm = cuda and shm_free is not None and shm_free >= 0 and shm_free < shm_needed(n, plan.prefetch_factor)
    if small_shm:  # torch's hand-over would die of SIGBUS in /dev/shm (resolve/shm.py): by value, unpinned
        plan = dataclasses.replace(plan, pin_memory=False, by_value_limit=None)
    start = ("forked from a fork server started before the model loads, which imports torch, transformers and "
             "the processor's classes once while the model builds (spawned workers each imported them "
             "before their first micro-batch: ~20 s of step 1 on a loaded 2-core CPU, benchmarks/data_wait.py)"
             if method == "forkserver" else "spawned (this platform has no fork server): each imports torch and "
                                             "transformers before its first micro-batch")
    return plan, Decision("train.num_workers",
                          f"{n} worker(s), {method}, persistent across epochs, {plan.prefetch_factor} micro-batches "
                          f"prefetched each, pinned memory {'on' if plan.pin_memory else 'off'}"
                          f"{'' if cuda else ' (no CUDA device)'}"
                          + (", micro-batches handed over by value (no /dev/shm)" if plan.by_value else ""),
                          f"train.num_workers={n}: {start}; never forked from the training process (a forked child "
                          "cannot use CUDA); persistent so each worker's encode cache lasts across epochs"
                          + (f"; /dev/shm has {shm_free / 2**20:.0f} MiB free, less than the "
                             f"{shm_needed(n, plan.prefetch_factor) / 2**20:.0f} MiB that {n} worker(s) x "
                             f"{plan.prefetch_factor} micro-batches in flight may take there (a Docker container's "
                             "default is 64 MB: workers die of 'Bus error'), so micro-batches cross by value through "
                             "the workers' pipes, unpinned (docker run --shm-size=8g gives torch's faster way back)"
                             if small_shm else ""),
                          changed=small_shm)
