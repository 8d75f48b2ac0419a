"""GPU catalog: memory, compute capability, bf16 support, dense peak TFLOP/s and memory bandwidth.

Figures from vendor spec sheets (see /work/shared/FACTS.md). `memory_bytes` is the card's nominal
memory (GB as 2**30 bytes); what CUDA reports as usable is a little lower and the planner's CUDA
overhead model accounts for the context on top. Below every command: the resolved run reads it for its
precision and attention decisions on a target GPU, `plan` for memory and speed.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

GiB = 2**30


@dataclass(frozen=True)
class GPUSpec:
    id: str
    name: str
    memory_bytes: int
    compute_capability: tuple[int, int]
    bf16: bool
    fp16_tflops: float  # dense tensor-core peak
    bf16_tflops: float | None  # None where the GPU has no bf16
    bandwidth_gbs: float  # GB/s
    # What the driver reports as usable total (a bit under nominal), the CUDA context + resident kernels
    # per process (lazy loading on), and cuBLAS + cuBLASLt workspaces of one stream (32 MiB on Hopper).
    usable_bytes: int = 0
    context_bytes: int = 450 * 2**20
    workspace_bytes: int = 9 * 2**20
    geforce: bool = False  # GeForce: fp32-accumulate matmuls (what training uses) run at half the rate

    @property
    def train_tflops(self) -> float:
        """Dense 16-bit tensor rate a training matmul (fp32 accumulate) reaches at best."""
        rate = self.bf16_tflops if self.bf16 and self.bf16_tflops else self.fp16_tflops
        return rate / 2 if self.geforce else rate

    @property
    def total_bytes(self) -> int:
        return self.usable_bytes or self.memory_bytes

    @property
    def fa2(self) -> bool:
        """FlashAttention-2 needs sm80+ (Ampere or newer)."""
        return self.compute_capability >= (8, 0)


GPUS: dict[str, GPUSpec] = {g.id: g for g in (
    GPUSpec("t4", "T4", 16 * GiB, (7, 5), False, 65, None, 320, int(15.0 * GiB), 370 * 2**20, 9 * 2**20, False),
    GPUSpec("v100-16gb", "V100 16GB", 16 * GiB, (7, 0), False, 125, None, 900, int(15.77 * GiB), 420 * 2**20, 9 * 2**20, False),
    GPUSpec("v100-32gb", "V100 32GB", 32 * GiB, (7, 0), False, 125, None, 900, int(31.74 * GiB), 420 * 2**20, 9 * 2**20, False),
    GPUSpec("quadro-rtx-6000", "Quadro RTX 6000", 24 * GiB, (7, 5), False, 130, None, 672, int(23.65 * GiB),
            400 * 2**20, 9 * 2**20, False),
    GPUSpec("rtx-3090", "RTX 3090", 24 * GiB, (8, 6), True, 71, 71, 936, int(23.69 * GiB), 450 * 2**20, 9 * 2**20, True),
    GPUSpec("rtx-4090", "RTX 4090", 24 * GiB, (8, 9), True, 165, 165, 1008, int(23.64 * GiB), 480 * 2**20, 9 * 2**20, True),
    GPUSpec("a10", "A10", 24 * GiB, (8, 6), True, 125, 125, 600, int(22.06 * GiB), 450 * 2**20, 9 * 2**20, False),
    GPUSpec("l4", "L4", 24 * GiB, (8, 9), True, 121, 121, 300, int(22.03 * GiB), 480 * 2**20, 9 * 2**20, False),
    GPUSpec("a100-40gb", "A100 40GB", 40 * GiB, (8, 0), True, 312, 312, 1555, int(39.39 * GiB), 500 * 2**20, 9 * 2**20, False),
    GPUSpec("a100-80gb", "A100 80GB", 80 * GiB, (8, 0), True, 312, 312, 2039, int(79.15 * GiB), 500 * 2**20, 9 * 2**20, False),
    GPUSpec("h100", "H100 SXM", 80 * GiB, (9, 0), True, 989, 989, 3350, int(79.11 * GiB), 520 * 2**20, 33 * 2**20, False),
    GPUSpec("h200", "H200", 141 * GiB, (9, 0), True, 989, 989, 4800, int(139.8 * GiB), 520 * 2**20, 33 * 2**20, False),
)}

ALIASES = {"h100-80gb": "h100", "rtx6000": "quadro-rtx-6000", "3090": "rtx-3090", "4090": "rtx-4090"}
# Names sold in more than one memory size: a plan for the wrong one is off by half the card, so the
# size must be said (`--gpu a100` used to mean the 80 GB card without a word).
AMBIGUOUS = {"a100": ("a100-40gb", "a100-80gb"), "v100": ("v100-16gb", "v100-32gb")}


def get_gpu(name: str) -> GPUSpec:
    """The spec of a GPU id (case-insensitive, `_`/` ` read as `-`); ConfigError with a did-you-mean."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    from .errors import ConfigError

    if key in AMBIGUOUS:
        choices = AMBIGUOUS[key]
        raise ConfigError(f"GPU {name!r} comes in {len(choices)} memory sizes", where="--gpu / train.gpu",
                          fix="say which: " + " or ".join(f"{c} ({GPUS[c].memory_bytes // GiB} GB)" for c in choices))

    close = difflib.get_close_matches(key, list(GPUS) + list(ALIASES), n=1)
    raise ConfigError(f"unknown GPU {name!r}", where="--gpu / train.gpu",
                      fix=(f"did you mean {close[0]!r}? " if close else "") + f"known: {', '.join(GPUS)}")
