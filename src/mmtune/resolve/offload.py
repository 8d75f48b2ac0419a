"""`train.offload`: where the optimizer's state lives, decided once with its reason.

- `none`: on the GPU, as every other tensor of the run.
- `optimizer` under `train.strategy=fsdp`: FSDP2's `CPUOffloadPolicy`. It cannot offload the optimizer
  state alone: each rank's *parameter shards* live in host memory, so their gradients land there and the
  optimizer (torch's AdamW, built on those parameters) keeps its moments there and steps on the CPU. Each
  unit's parameters are copied to the GPU for its forward and backward and dropped after; its gradients
  are copied back once reduced. The GPU then holds no weights between units, no gradient shards and no
  optimizer state: more than "optimizer offload", said so in the decision.
- `optimizer` under `zero2` / `zero3`: DeepSpeed's ZeRO-Offload (`offload_optimizer: {device: cpu}`): the fp32
  master partition, its gradients and the Adam moments in pinned host memory, the optimizer step on the
  CPU; the 16-bit weights stay on the GPU (zero2) or partitioned on it (zero3).
- refused under `ddp` and on one process: mmtune shards nothing there, and an optimizer moved to the CPU
  by hand would need a copy of every trainable weight and gradient per step with nothing to hide it
  behind; the refusal names the strategies that do it and the single-GPU ways to shrink the state.
"""

from __future__ import annotations

from ..errors import ConfigError
from .decisions import Decision

KEY = "train.offload"
STRATEGIES = ("fsdp", "zero2", "zero3")


def decide_offload(requested: str, strategy: str, processes: int) -> Decision | None:
    """The offload decision for the run's (already decided) strategy on `processes` processes; None when
    nothing is offloaded (no line: the default adds nothing to the summary)."""
    if requested == "none":
        return None
    if processes <= 1 or strategy not in STRATEGIES:
        why = "one process: mmtune shards nothing there" if processes <= 1 else \
            f"train.strategy={strategy} keeps a whole optimizer on every GPU"
        raise ConfigError(f"train.offload={requested}: {why}, so there is nothing to offload through",
                          where=KEY,
                          fix="train.strategy=zero2 (DeepSpeed ZeRO-Offload: fp32 master + Adam moments on the CPU) or "
                              "train.strategy=fsdp (FSDP2 CPUOffloadPolicy) on 2+ GPUs (torchrun --nproc_per_node N); "
                              "on one GPU: train.optimizer=paged_adamw_8bit (state paged to host memory under "
                              "pressure) or adapter.method=qlora")
    if strategy == "fsdp":
        return Decision(KEY, "optimizer (FSDP2 CPUOffloadPolicy)",
                        "requested; FSDP2 offloads whole shards: parameters, gradients and the optimizer's state live "
                        "in pinned host memory, each unit copied to the GPU for its forward / backward, the optimizer "
                        "steps on the CPU (plan: offload rows; docs/distributed.md)")
    return Decision(KEY, f"optimizer (DeepSpeed ZeRO-Offload, stage {strategy[-1]})",
                    "requested; offload_optimizer device cpu: the fp32 master partition, its gradients and the Adam "
                    "moments in pinned host memory, the optimizer step on the CPU; 16-bit weights stay on the GPU "
                    "(plan: offload rows; docs/distributed.md)")


def offloads(resolved) -> bool:
    """Whether the resolved run keeps its optimizer state on the CPU."""
    return getattr(resolved.cfg.train, "offload", "none") == "optimizer"
