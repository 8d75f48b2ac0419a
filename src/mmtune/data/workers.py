"""How the training DataLoader's workers start and feed the loop (train.num_workers > 0).

The settings are decided once, in the resolved run (`resolve/decisions.py: decide_loader`), and applied
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
