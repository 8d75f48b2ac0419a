"""How the training DataLoader's workers start and feed the loop (train.num_workers > 0).

The settings are decided once, in the resolved run (`resolve/data_loading.py: decide_loader`), and applied
here. Why a fork server: a worker must never be forked from the training process (a forked child cannot
use CUDA once the parent has; failure mode 20), and a spawned worker starts a fresh interpreter that
imports torch, transformers and the processor's classes itself before it encodes anything -- ~4 s of CPU
each, 20-25 s of wall time before step 1's first micro-batch on a loaded 2-core machine
(benchmarks/data_wait.py). With `forkserver`, one clean process (it never touches CUDA) imports those
modules once, started by `start_server` before the model loads so the imports overlap the model build and
the start-up scan; each worker is then forked from it, already warm, and only unpickles the dataset.
Where the platform has no fork server (Windows), workers are spawned as before.
"""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass

# What a worker needs to unpickle the loop's dataset and collator and to encode records; the processor's
# own classes are added by `preload_modules` (they depend on the model family).
BASE_PRELOAD = ("torch", "transformers", "PIL.Image", "mmtune.data.encode", "mmtune.data.collate",
                "mmtune.data.media", "mmtune.train.loop")


# A micro-batch up to this size crosses from a CPU run's worker by value (see ByValue); a larger one through torch's
# shared memory, whose fixed cost per tensor is then small next to copying it through a pipe.
BY_VALUE_BYTES = 8 << 20


@dataclass(frozen=True)
class LoaderPlan:
    num_workers: int = 0
    start_method: str | None = None  # "forkserver" | "spawn" (None: no workers)
    persistent: bool = False  # workers kept across epochs (their encode caches with them)
    prefetch_factor: int | None = None  # micro-batches each worker keeps ready
    pin_memory: bool = False  # page-locked host batches: only with a CUDA device to copy them to
    # Micro-batches a background thread of the training process keeps prepared (train.prefetch, no workers:
    # train/prefetch.py); 0: prepared when the loop asks. Not a DataLoader argument.
    thread_prefetch: int = 0
    # That thread encodes only while the step's backward runs (and while the loop waits for it): the backward takes
    # Python's GIL only to free the tensors Python saw, the forward after every op (train/prefetch.py).
    thread_in_backward: bool = False
    # ByValue's size limit: a larger micro-batch takes torch's shared memory; None: every micro-batch by value (a
    # CUDA run whose /dev/shm is too small for torch's way: resolve/shm.py).
    by_value_limit: int | None = BY_VALUE_BYTES

    @property
    def by_value(self) -> bool:
        """Workers hand their micro-batches over by value (ByValue): a CPU run's, and a CUDA run's whose /dev/shm
        is too small (resolve/shm.py); other CUDA runs' go through torch's shared memory, where the pin-memory
        thread pins them."""
        return self.num_workers > 0 and not self.pin_memory

    def loader_kwargs(self) -> dict:
        if self.num_workers == 0:
            return {"num_workers": 0}
        return {"num_workers": self.num_workers, "multiprocessing_context": self.start_method,
                "persistent_workers": self.persistent, "prefetch_factor": self.prefetch_factor,
                "pin_memory": self.pin_memory}


def has_forkserver() -> bool:
    return "forkserver" in multiprocessing.get_all_start_methods()


def preload_modules(processor) -> list[str]:
    """BASE_PRELOAD plus the modules of the processor's classes and its parts (image / video processor,
    tokenizer, feature extractor): what unpickling it in a worker would import."""
    mods = list(BASE_PRELOAD)
    parts = [processor] + [getattr(processor, a, None) for a in
                           ("image_processor", "video_processor", "tokenizer", "feature_extractor", "audio_processor")]
    for p in parts:
        if p is not None and type(p).__module__ not in mods:
            mods.append(type(p).__module__)
    return mods


def start_server(plan: LoaderPlan, processor) -> None:
    """Start the fork server now: it imports in the background while the model loads, and returns at once.
    A server already running in this process (an earlier run in the same process) is reused as it is (the
    preload list only applies to a new one): whatever it lacks, a worker imports itself."""
    if plan.start_method != "forkserver":
        return
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(preload_modules(processor))
    forkserver.ensure_running()



class Carried:
    """A tensor on its way from a worker, as a numpy array (bf16 / fp16 viewed as int16: numpy has no bf16)."""

    __slots__ = ("array", "dtype")

    def __init__(self, tensor):
        import torch

        self.dtype = str(tensor.dtype).removeprefix("torch.")
        self.array = (tensor.view(torch.int16) if tensor.dtype in (torch.bfloat16, torch.float16) else tensor).numpy()

    def __getstate__(self):
        return self.array, self.dtype

    def __setstate__(self, state):
        self.array, self.dtype = state

    def tensor(self):
        import torch

        t = torch.from_numpy(self.array)
        return t.view(getattr(torch, self.dtype)) if self.dtype in ("bfloat16", "float16") else t


class ByValue:
    """A CPU run's worker hands its micro-batch over by value: the tensors pickled as numpy arrays through the
    DataLoader's result pipe, rebuilt in the training process by `received` (torch.from_numpy, no copy).

    Why: torch's own hand-over moves every tensor into a new shared-memory file whose descriptor is passed over a
    socket and mapped by the receiver; for a micro-batch of the image twin (4 records, ~1.2 MB, 6 tensors) a worker
    fed 5.0 ms a micro-batch that way and 3.3 ms by value, and the training process waited 1.7 ms against 1.3 ms
    (benchmarks/worker_handover.py, results/worker_handover_counting_cpu2_20261128.json). It also needs no
    /dev/shm, which containers often keep at 64 MB (where torch's workers die of a bus error). Not with pinned
    memory (a CUDA run): the pin-memory thread pins torch's tensors; a batch past BY_VALUE_BYTES keeps torch's way."""

    def __init__(self, collate, limit: int | None = BY_VALUE_BYTES):
        self.collate, self.limit = collate, limit

    def __call__(self, items):
        import torch

        batch = self.collate(items)
        tensors = [v for v in batch.values() if isinstance(v, torch.Tensor)]
        if self.limit is not None and sum(t.numel() * t.element_size() for t in tensors) > self.limit:
            return batch
        return {k: Carried(v) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def received(batch: dict) -> dict:
    """A micro-batch as the worker collated it: `Carried` tensors rebuilt (a no-op for one that came as tensors)."""
    return {k: v.tensor() if isinstance(v, Carried) else v for k, v in batch.items()}
