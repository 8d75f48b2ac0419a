"""What the launch environment says that the config does not, put into the resolved run's decisions.

- `CUDA_VISIBLE_DEVICES` set to an empty string (or -1), as job schedulers do on a node without a GPU allocation and
  scripts do to force the CPU, hides every GPU from torch, and an id past the machine's GPUs (`=1` on a one-GPU
  machine) hides them as well. A run with `train.device=auto` then trains on the CPU; the target names the variable,
  so the reason is on the start screen, not found later from the step time.
- `LOCAL_WORLD_SIZE` (torchrun's `--nproc_per_node`, accelerate's `--num_processes` on one machine) above the GPUs
  torch sees: a script that takes GPU `LOCAL_RANK` stops with "CUDA error: invalid device ordinal"; accelerate
  (1.15, what mmtune runs) takes `LOCAL_RANK % device_count`, so two ranks share a GPU and NCCL refuses them at the
  first collective ("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device"). Refused at start instead.
- Several GPU processes with a torch built without NCCL (the Windows and macOS wheels): accelerate starts the
  process group with NCCL for CUDA devices, so every rank stops in `init_process_group` with "Distributed package
  doesn't have NCCL built in" (after the launcher's own rendezvous, which on Windows fails first in torch 2.4's
  libuv TCPStore). Refused at start, naming the platform, instead.
- An Apple GPU (MPS): mmtune trains on CUDA GPUs or the CPU (accelerate is started with cpu=True for a CPU target,
  so nothing lands on MPS, where bf16 autocast, fp16 training and many ops are missing: "BFloat16 is not supported
  on MPS", "not currently implemented for the MPS device"). A Mac's run is a CPU run; the target says so and why.
- `ACCELERATE_MIXED_PRECISION` (`accelerate launch --mixed_precision`, or the accelerate config file's
  `mixed_precision`) is not what a run trains in: mmtune passes its own `train.precision` to accelerate, which
  overrides the launcher's. When the two differ, the precision decision says so.
- A CPU-only build of torch (`2.13.0+cpu`: the CPU wheel index, or a package that pulled torch from PyPI on a
  platform whose default wheel has no CUDA) sees no GPU on a GPU machine: "Torch not compiled with CUDA enabled",
  or a run with train.device=auto on the CPU. The target names the build (and the NVIDIA GPUs the driver lists),
  so the fix is a CUDA build of torch, not another machine.
"""

from __future__ import annotations

import os


def hidden_gpus_note() -> str | None:
    """A note naming CUDA_VISIBLE_DEVICES when it is set (call it when torch sees no GPU), else None."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    first = value.split(",")[0].strip()
    if first == "" or first.startswith("-"):
        return f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU"
    return f"CUDA_VISIBLE_DEVICES={value!r} leaves no GPU visible (ids count from 0: does this machine have GPU {first}?)"


_ACCELERATE = {"no": "fp32", "bf16": "bf16", "fp16": "fp16"}


def launcher_precision_note(precision: str) -> str | None:
    """A note when `accelerate launch` asked for another mixed precision than the run's `precision`, else None."""
    asked = os.environ.get("ACCELERATE_MIXED_PRECISION")
    if not asked or _ACCELERATE.get(asked.strip().lower(), asked) == precision:
        return None
    if asked.strip().lower() not in _ACCELERATE:  # fp8 (transformer-engine / torchao / MS-AMP): no setting of ours
        return (f"accelerate launch asked for mixed_precision={asked} (ACCELERATE_MIXED_PRECISION: --mixed_precision "
                f"or the accelerate config file), which mmtune does not train in: the run trains in {precision} "
                "(train.precision=bf16 | fp16 | fp32)")
    return (f"accelerate launch asked for mixed_precision={asked} (ACCELERATE_MIXED_PRECISION: --mixed_precision or "
            f"the accelerate config file), which the run's own precision overrides; "
            f"train.precision={_ACCELERATE.get(asked.strip().lower(), asked)} follows the launcher")


def local_processes() -> int:
    """Processes the launcher started on this machine (torchrun / accelerate set LOCAL_WORLD_SIZE); 1 when it is
    unset or unreadable. Not WORLD_SIZE: on several nodes that counts every node's processes."""
    raw = os.environ.get("LOCAL_WORLD_SIZE", "1").strip()
    return max(1, int(raw)) if raw.isdigit() else 1


def too_many_processes(visible_gpus: int) -> tuple[str, str] | None:
    """(what is wrong, the fix) when this machine's launch started more processes than torch sees GPUs, else None."""
    local = local_processes()
    if local <= visible_gpus:
        return None
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    shown = f" (CUDA_VISIBLE_DEVICES={cvd!r})" if cvd is not None else ""
    extra = f"local rank {visible_gpus}" if local - 1 == visible_gpus else f"local ranks {visible_gpus}..{local - 1}"
    return (f"the launch started {local} processes on this machine (LOCAL_WORLD_SIZE={local}: torchrun's "
            f"--nproc_per_node) but torch sees {visible_gpus} GPU(s){shown}: one process per GPU, so {extra} "
            f"would share a GPU with another rank, which NCCL refuses ('Duplicate GPU "
            "detected'; scripts that take GPU LOCAL_RANK stop with 'invalid device ordinal')",
            f"launch with --nproc_per_node {visible_gpus} (one process per visible GPU)"
            + (", or name more GPUs in CUDA_VISIBLE_DEVICES" if cvd is not None else ""))


def no_nccl(processes: int) -> tuple[str, str] | None:
    """(what is wrong, the fix) when a launch of several GPU processes meets a torch without NCCL, else None."""
    if processes <= 1:
        return None
    import sys

    import torch.distributed as dist

    if dist.is_available() and dist.is_nccl_available():
        return None
    return (f"the launch started {processes} GPU processes (WORLD_SIZE={processes}) but this torch ({sys.platform}) "
            "has no NCCL, which accelerate starts the process group with for CUDA devices: every rank would stop "
            "with \"Distributed package doesn't have NCCL built in\" (Windows and macOS builds of torch have none)",
            "train on one GPU (mmtune train CONFIG, no torchrun / accelerate launch), or launch several GPUs under "
            "Linux (WSL2 on Windows)")


def mps_note() -> str | None:
    """A note when torch sees an Apple GPU (MPS) that the run will not use, else None."""
    import torch

    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_available():
        return None
    return ("the Apple GPU (MPS) is not used: mmtune trains on CUDA GPUs or the CPU (MPS lacks bf16 autocast and "
            "ops training needs); plan a CUDA GPU with mmtune plan --gpu NAME")


# The NVIDIA driver lists one folder per GPU here, whatever torch was built with (Linux).
NVIDIA_DRIVER_GPUS = "/proc/driver/nvidia/gpus"


def driver_gpu_count() -> int:
    """How many NVIDIA GPUs the driver lists (0 without a driver or off Linux), asked without torch."""
    try:
        return len(os.listdir(NVIDIA_DRIVER_GPUS))
    except OSError:
        return 0


def cpu_torch_note(torch_version: str, torch_cuda: str | None, torch_hip: str | None, gpus: int) -> str | None:
    """A note when torch is a CPU-only build (`torch.version.cuda` and `.hip` both None), naming the `gpus` NVIDIA
    GPUs the driver lists, which such a torch cannot use; None for a CUDA / ROCm build."""
    if torch_cuda is not None or torch_hip is not None:
        return None
    seen = f"this machine's driver lists {gpus} NVIDIA GPU(s) ({NVIDIA_DRIVER_GPUS}), which it cannot use" if gpus \
        else "it cannot use a GPU"
    return f"torch {torch_version} is a CPU-only build (torch.version.cuda is None): {seen}"


CUDA_TORCH_FIX = ("install a CUDA build of torch: pip install --force-reinstall torch --index-url "
                  "https://download.pytorch.org/whl/cu126 (the CUDA version your driver supports: nvidia-smi)")
