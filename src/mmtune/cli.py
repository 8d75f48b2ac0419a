"""The `mmtune` command. Thin: parse, call one function, print.

Each sub-command lives beside the code it drives and registers itself here through `register(app)`,
so this file stays a table of contents.
"""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Fine-tune multimodal LMs; plan memory and catch failures before renting a GPU.")


def _quiet_library_noise() -> None:
    """The command line shows what mmtune decided and why; library chatter that is not actionable for a
    user (deprecations inside transformers/peft, bitsandbytes' optional CPU kernel hub, transformers'
    info about rope names mmtune normalises) is kept out of it. A user's own TRANSFORMERS_VERBOSITY wins."""
    import logging
    import os
    import warnings

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"(transformers|torch)\.")
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    # accelerate's unwrap_model imports DeepSpeed where it is installed, and DeepSpeed announces its CPU
    # fallback on *stdout* ("Setting accelerator to CPU ..."): `mmtune chat RUN "q"` then printed it before
    # the answer. Only that notice is dropped; DeepSpeed's other warnings still show.
    logging.getLogger("DeepSpeed").addFilter(lambda record: not str(record.msg).startswith("Setting accelerator to CPU"))


def _register_all() -> None:
    from .commands import register_core

    register_core(app)
    for module in ("mmtune.plan.cli", "mmtune.doctor.cli", "mmtune.data.cli", "mmtune.models.cli",
                   "mmtune.report.cli", "mmtune.chat.cli", "mmtune.serve.cli"):
        try:
            mod = __import__(module, fromlist=["register"])
        except ModuleNotFoundError as e:
            if e.name != module:  # a real missing dependency inside the module: surface it
                raise
            continue
        mod.register(app)


_quiet_library_noise()
_register_all()


def _freeze_before_exit() -> None:
    """Spare the interpreter's shutdown its cycle searches. With torch and transformers imported, the garbage
    collections Python runs while it tears the modules down cost ~1.1 of the ~1.2 s of CPU that exit takes
    (`python -c "import torch, transformers.modeling_utils"`: 4.9-5.0 s CPU, 3.9 s with this, 3.7 s with
    os._exit; docs/startup.md). `gc.freeze` (public, Python >= 3.7) moves every object alive now out of the
    collector's reach: the atexit handlers (log and tensorboard flushes, temporary folders) still run, and
    objects are still freed by reference counting as the modules are cleared; only unreachable cycles are
    left to the OS, which reclaims the whole process a moment later."""
    import gc

    gc.freeze()


def _short_openmp_spins() -> None:
    """torch's CPU kernels run on OpenMP threads (one per core by default). Between parallel regions each of
    libgomp's threads spins 300,000 times before it sleeps (GOMP_SPINCOUNT's default): on a machine where
    anything else runs, a spinning thread holds a core that the thread the next region waits for needs. 10,000
    spins keep the quiet machine's speed and give most of that back (benchmarks/openmp_waits.py, the demo's
    training on this 2-core machine, results/openmp_waits_cpu2_20261128_*.json: docs/startup.md). Sleeping at
    once (OMP_WAIT_POLICY=PASSIVE) wins more under load but costs a third of the quiet machine's tokens/s.
    libgomp reads it once, when torch loads it, so it is set here, before any command imports torch; the
    processes a run starts (DataLoader workers, ranks) inherit it. A user's own OMP_WAIT_POLICY or
    GOMP_SPINCOUNT wins."""
    import os

    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = "10000"


def _end_process_group() -> None:
    """A rank launched by torchrun / accelerate that finished its command leaves its process group by itself.
    Left to the interpreter's shutdown, gloo's worker threads are torn down with it and a rank whose work is all
    done can abort ("terminate called without an active exception", SIGABRT): the launcher then reports the run
    failed, and kills the other ranks. Seen here in 2-rank tests after both ranks had written their results;
    pytorch/pytorch#190489 is the same. Only after success: a rank that failed exits without it (destroying a
    group other ranks may still be using can hang them: torchtitan#1342). Never imports torch itself."""
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception as e:  # noqa: BLE001 - the command's work is done and saved: its exit code stays success
            print(f"note: leaving the process group failed ({e}); the command itself succeeded", file=sys.stderr)


def main() -> None:  # console entry point (pyproject's [project.scripts]) and `python -m mmtune.cli`
    from .commands.startup_gc import relax_for_startup

    _short_openmp_spins()
    relax_for_startup()
    try:
        app()
    except SystemExit as done:  # typer ends every command with SystemExit; code 0 / None is success
        if not done.code:
            _end_process_group()
        raise
    finally:
        _freeze_before_exit()


if __name__ == "__main__":  # pragma: no cover
    main()
