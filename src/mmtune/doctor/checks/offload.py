"""Checks of `train.offload=optimizer` (resolve/offload.py, plan/offload.py), each from what users of
DeepSpeed ZeRO-Offload and FSDP2 CPU offload hit (sources per check: docs/doctor.md):
- MM075 host RAM too small for the pinned offloaded state: the process is killed (signal 9) by the kernel's
  OOM killer, not stopped with a message (DeepSpeed#4571, #4380, #4867);
- MM076 DeepSpeed's CPU Adam op cannot be had: ZeRO-Offload falls back to torch's AdamW on the CPU;
- MM077 offload asked where nothing is sharded (one process, ddp): refused with the strategies that do it;
- MM078 FSDP2 CPU offload with gradient clipping on a process group without a CPU backend: "No backend
  type associated with device type cpu" at the first optimizer step (pytorch#148532, torchtune#1977).
"""

from __future__ import annotations

from ...host_memory import host_ram_bytes
from ..context import NotAvailable
from ..findings import error, info, warning
from ..registry import check


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


@check("MM075", "host RAM holds the offloaded optimizer state (pinned)", needs=("cfg", "resolved", "plan"))
def host_ram(ctx):
    """Offloaded state is pinned (page-locked): it cannot be swapped out, so a node whose RAM is short kills
    the process instead of slowing down. The plan's host bytes per node (every local rank's) are compared
    with this machine's RAM when the run executes here, and stated when it is planned for another one."""
    resolved, plan = ctx.need("resolved"), ctx.need("plan")
    off = getattr(plan, "offload", None) or {}
    if resolved.offload == "none" or not off:
        return
    need = off["host_bytes_per_node"]
    if not resolved.target.local:
        yield info(f"train.offload=optimizer: each node needs {_gib(need)} of pinned host RAM for the offloaded state "
                   f"({_gib(off['host_bytes_per_rank'])} per rank), beside the processes' own memory; this plan is for "
                   f"{resolved.target.describe()}, whose RAM is not known here", where="train.offload",
                   fix="check `free -g` on the GPU machine")
        return
    total, available = host_ram_bytes()
    have = available if available is not None else total
    if need > have:
        yield error(f"train.offload=optimizer pins {_gib(need)} of host RAM on this node ({_gib(off['host_bytes_per_rank'])} "
                    f"per rank) and {_gib(have)} is {'available' if available is not None else 'installed'}: the kernel "
                    "kills the process (signal 9) when it runs out", where="train.offload",
                    fix="more RAM, fewer ranks per node, train.offload=none with more GPUs (zero3 / fsdp shard the state "
                        "1/N), or adapter.method=lora (a few % of the parameters have state)")
    elif need > 0.7 * have:
        yield warning(f"train.offload=optimizer pins {_gib(need)} of the {_gib(have)} host RAM "
                      f"{'available' if available is not None else 'installed'}: data loading workers and the "
                      "processes themselves need the rest", where="train.offload",
                      fix="train.num_workers=0, or fewer ranks per node")


@check("MM076", "ZeRO-Offload steps the optimizer with DeepSpeed's CPU Adam", needs=("cfg", "resolved"), fast=True)
def cpu_adam(ctx):
    """Under ZeRO-Offload the optimizer step runs on the CPU. DeepSpeed's C++ AdamW (SIMD + OpenMP) is the fast
    one; where its op cannot be built the run falls back to torch's AdamW on the CPU (zero_force_ds_cpu_optimizer
    false), which DeepSpeed itself calls "poor performance". A JIT build on first use takes minutes."""
    resolved = ctx.need("resolved")
    if resolved.offload == "zero-torch":
        d = resolved.decision("train.offload")
        yield warning(f"ZeRO-Offload without DeepSpeed's CPU Adam: {d.reason if d else ''}", where="train.offload",
                      fix="DS_BUILD_CPU_ADAM=1 pip install deepspeed (prebuilt op), or ninja + a C++ compiler for the "
                          "build on first use; `ds_report` lists the ops")
    elif resolved.offload == "zero-cpuadam" and resolved.target.local:
        from ...compat.deepspeed_ops import cpu_adam_prebuilt

        if not cpu_adam_prebuilt():
            yield info("DeepSpeed's cpu_adam op is not prebuilt: the first run compiles it (minutes; cached in "
                       "~/.cache/torch_extensions after)", where="train.offload",
                       fix="DS_BUILD_CPU_ADAM=1 pip install deepspeed to build it at install time")


@check("MM077", "optimizer offload goes through a strategy that supports it", needs=("cfg",), fast=True)
def offload_strategy(ctx):
    """resolve/offload.py refuses train.offload=optimizer on one process and under ddp; said here with the
    strategies that do offload (and the single-GPU alternatives)."""
    cfg = ctx.need("cfg")
    if cfg.train.offload == "none":
        return
    try:
        ctx.need("resolved")
    except NotAvailable:
        for b in ctx.build_errors:
            if b.piece == "resolved" and b.where == "train.offload" and not b.claimed:
                b.claimed = True
                yield error(b.what, b.where, b.fix)


@check("MM078", "FSDP2 CPU offload can clip gradients on the run's process group", needs=("cfg", "resolved"), fast=True)
def offload_clipping(ctx):
    """With CPUOffloadPolicy the gradient shards are CPU DTensors, so clip_grad_norm_ all-reduces CPU tensors: an
    NCCL-only process group stops there. mmtune starts its own runs with a gloo backend for CPU tensors beside
    NCCL (sharding.start_offload_process_group); a process group started by someone else before mmtune must have one too."""
    cfg, resolved = ctx.need("cfg"), ctx.need("resolved")
    if resolved.offload != "fsdp" or resolved.device != "cuda" or not cfg.train.max_grad_norm:
        return
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return  # mmtune starts the process group itself, with "cpu:gloo,cuda:nccl"
    backend = str(dist.get_backend())
    if "gloo" not in backend and "cpu" not in backend:
        yield error(f"FSDP2 CPU offload with train.max_grad_norm={cfg.train.max_grad_norm} on a process group with "
                    f"backend {backend!r}: clipping all-reduces the CPU gradient shards and stops with \"No backend type "
                    "associated with device type cpu\"", where="train.offload",
                    fix='init_process_group("cpu:gloo,cuda:nccl") where the process group is started, or let mmtune '
                        "start it (torchrun), or train.max_grad_norm=null")
