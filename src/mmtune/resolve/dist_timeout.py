"""train.dist_timeout_minutes: how long a rank may wait at a collective before the process group ends the run.

Why a run needs more than torch's default: at a save, the main rank alone writes the checkpoint's loadable
weights (`adapter/` or a full model's `model/`), the exact copy of the trainable tensors and, under ddp, the
optimizer state, then reads every file back for the manifest's sha256 (train/checkpoint.py). The other ranks
go on to the next step and wait at its first collective; NCCL's watchdog ends them after the group's timeout
(torch's default for NCCL and DeepSpeed's init_distributed: 10 min, "Watchdog caught collective operation
timeout ... Timeout(ms)=600000", LlamaFactory#7396, DeepSpeed#7533, torchtune#2093). Every other main-rank-only
phase is smaller: removing a save's leftovers or pruned checkpoints, writing logs and predictions; evaluation
and the start-up data check run on every rank.

The rule, simple on purpose: rank 0's lone work at a save is at most writing one checkpoint and reading it back,
timed at a slow network disk's 50 MiB/s, rounded up to 10 minutes, at least 30 (torch's default for gloo and
transformers' ddp_timeout). A real hang is then found later than with 10 minutes; a save is never taken for one.
"""

from __future__ import annotations

import math

from .decisions import LORA_SHARE, Decision

KEY = "train.dist_timeout_minutes"
SLOW_DISK = 50 * 2**20  # bytes/s: a slow network disk (cloud SSDs' baselines are 125-250 MiB/s)
FLOOR_MINUTES = 30
GIB = 2**30


def checkpoint_bytes(method: str, total: int, by_component: dict[str, int], train: tuple[str, ...],
                     freeze: tuple[str, ...], precision: str, fp32_trainable: bool) -> tuple[int, str]:
    """(bytes of one checkpoint, what it holds), as train.checkpoint.estimate_checkpoint_bytes counts a
    written model: the loadable export, the exact copy of the trainable tensors and Adam's two moments
    (in the trainable dtype). `by_component`: parameters per component of the model (a meta build)."""
    weight = 4 if precision == "fp32" else 2
    tb = 4 if fp32_trainable or precision == "fp32" else 2
    frozen = sum(n for c, n in by_component.items() if c in freeze)
    if method == "full":
        trainable = total - frozen
        export, what = trainable * tb + frozen * weight, "the whole model"
    else:  # LoRA: the allowance decide_strategy uses, plus the components trained in full
        trainable = total // LORA_SHARE + sum(n for c, n in by_component.items() if c in train and c not in freeze)
        export, what = trainable * tb, "the adapter"
    return export + 3 * trainable * tb, f"{what}, the exact copy of {_count(trainable)} trainable weights and Adam's state"


def auto_minutes(size: int) -> int:
    """Writing and reading back `size` bytes at SLOW_DISK, in minutes rounded up to 10, at least FLOOR_MINUTES."""
    return max(FLOOR_MINUTES, 10 * math.ceil(2 * size / SLOW_DISK / 600))


def decide_dist_timeout(requested, processes: int, strategy: str, size) -> tuple[float | None, Decision | None]:
    """(minutes, decision); None minutes on one process (no process group). `size()`: checkpoint_bytes's
    (bytes, what), asked only when several processes run."""
    if processes <= 1:
        return None, (Decision(KEY, "not used", "one process: no process group") if requested != "auto" else None)
    nbytes, what = size()
    auto = auto_minutes(nbytes)
    who = ("rank 0 alone writes it and reads it back for the manifest's checksums" if strategy == "ddp" else
           "each rank writes its shards, then rank 0 alone writes what is not sharded and reads the whole checkpoint "
           "back for the manifest's checksums")
    save = (f"a save is ~{nbytes / GIB:.1f} GiB ({what}); {who} while the other {processes - 1} rank(s) wait at "
            f"their next collective: ~{2 * nbytes / SLOW_DISK / 60:.0f} min at 50 MiB/s (a slow network disk)")
    if requested != "auto":
        short = f"; shorter than the {auto} min auto allows: {save}" if requested < auto else ""
        return float(requested), Decision(KEY, f"{requested:g} min", f"requested{short}")
    return float(auto), Decision(KEY, f"{auto} min", f"auto: {save}; rounded up to 10 min, at least "
                                 f"{FLOOR_MINUTES} (NCCL's default watchdog, and DeepSpeed's, is 10 min)", changed=True)


def _count(n: int) -> str:
    return f"{n / 1e9:.1f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"
