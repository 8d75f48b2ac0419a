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


def decide_offload(requested: str, strategy: str, target, optimizer: str = "adamw") -> tuple[str, Decision | None]:
    """(mode, decision) for the run's (already decided) strategy on `target`; mode is one of MODES. No
    decision line when nothing is offloaded (the default adds nothing to the summary)."""
    if requested == "none":
        return "none", None
    processes = target.processes
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
        return "fsdp", Decision(KEY, "optimizer (FSDP2 CPUOffloadPolicy)",
                                "requested; FSDP2 offloads whole shards: parameters, gradients and the optimizer's state "
                                "live in host memory (pinned on a GPU), each unit copied to the GPU for its forward / "
                                f"backward, torch {optimizer} steps on the CPU (docs/distributed.md#optimizer-offload)")
    stage = strategy[-1]
    from ..optim import BITSANDBYTES

    if optimizer in BITSANDBYTES:
        raise ConfigError(f"train.offload=optimizer with train.optimizer={optimizer}: bitsandbytes' optimizers step "
                          "CUDA tensors, and ZeRO-Offload hands the optimizer CPU tensors", where=KEY,
                          fix="train.optimizer=adamw (DeepSpeed's CPU Adam then steps it), or train.offload=none")
    problem = cpu_adam_here(target) if optimizer == "adamw" else f"train.optimizer={optimizer} is not Adam"
    common = ("offload_optimizer device cpu: the fp32 master partition, its gradients and the optimizer's moments in "
              "pinned host memory, the optimizer step on the CPU, 16-bit weights kept on the GPU")
    if problem is None:
        return "zero-cpuadam", Decision(KEY, f"optimizer (DeepSpeed ZeRO-Offload, stage {stage}, DeepSpeedCPUAdam)",
                                        f"requested; {common}; DeepSpeed's C++ AdamW steps it "
                                        "(docs/distributed.md#optimizer-offload)")
    return "zero-torch", Decision(KEY, f"optimizer (DeepSpeed ZeRO-Offload, stage {stage}, torch {optimizer} on the CPU)",
                                  f"requested; {common}; stepped by torch's {optimizer} (zero_force_ds_cpu_optimizer "
                                  f"false) because DeepSpeedCPUAdam cannot be had: {problem} (several times slower "
                                  "per step; the doctor's MM076 says so)", changed=True)


MODES = ("none", "fsdp", "zero-cpuadam", "zero-torch")


def cpu_adam_here(target) -> str | None:
    """Why DeepSpeed's CPU Adam cannot step the run on `target` (None: it can). A plan for a catalog GPU with
    the GPU extra assumed takes DeepSpeed with its op as there; otherwise this machine is asked."""
    if not target.local and target.assume_installed == "gpu-extra":
        return None
    from ..compat.deepspeed_ops import cpu_adam_problem

    return cpu_adam_problem()


def offloads(resolved) -> bool:
    """Whether the resolved run keeps its optimizer state on the CPU."""
    return resolved.offload != "none"
