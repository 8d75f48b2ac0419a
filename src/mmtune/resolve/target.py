"""Where a run executes: this machine (train, eval) or a target GPU named for a plan (plan, doctor).

Every hardware-dependent decision (precision, loss scaling, attention kernel) is taken against a
`Target`, so `plan --gpu t4` and `train` on a T4 decide the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..gpus import GPUS, GPUSpec, get_gpu


@dataclass(frozen=True)
class Target:
    device: str  # "cpu" or "cuda"
    gpu: GPUSpec | None  # the GPU's spec (None on the CPU)
    origin: str  # how it was chosen: "this machine", "--gpu t4", "train.gpu=t4"
    local: bool  # the run executes on this machine (its libraries and kernels are the ones used)
    processes: int = 1  # data-parallel processes (GPUs) in all: WORLD_SIZE here, --gpus x --nodes in a plan
    nodes: int = 1

    @property
    def sm(self) -> str:
        if self.gpu is None:
            return ""
        major, minor = self.gpu.compute_capability
        return f"sm_{major}{minor}"

    def describe(self) -> str:
        many = ""
        if self.processes > 1:
            many = f" x{self.processes}" + (f" on {self.nodes} nodes" if self.nodes > 1 else "")
        if self.gpu is None:
            return f"CPU{many} ({self.origin})"
        return f"{self.gpu.name}{many} ({self.sm}, {self.origin})"


def gpu_target(name, origin: str | None = None, *, gpus: int = 1, nodes: int = 1) -> Target:
    """A catalog GPU the run is planned for (unknown names: ConfigError with a did-you-mean), or a
    GPUSpec given directly (what-if plans of a card not in the catalog); `gpus` per node x `nodes`."""
    spec = name if isinstance(name, GPUSpec) else get_gpu(name)
    return Target("cuda", spec, origin or f"--gpu {spec.id if isinstance(name, GPUSpec) else name}", local=False,
                  processes=max(1, gpus) * max(1, nodes), nodes=max(1, nodes))


def launched_processes() -> tuple[int, int]:
    """(processes, nodes) of this launch: torchrun / accelerate set WORLD_SIZE and LOCAL_WORLD_SIZE."""
    import os

    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)) or world)
    return world, max(1, world // max(1, local))


def local_target(requested_device: str = "auto") -> Target:
    """This machine: its first CUDA GPU unless the config asks for the CPU (train.device)."""
    import torch

    cuda = torch.cuda.is_available()
    if requested_device == "cuda" and not cuda:
        from ..errors import ConfigError

        raise ConfigError("train.device=cuda but no CUDA GPU is visible", where="train.device",
                          fix="train.device=auto (uses the CPU here) or run on a machine with a GPU")
    world, nodes = launched_processes()
    if requested_device == "cpu" or not cuda:
        return Target("cpu", None, "this machine" if requested_device != "cpu" else "train.device=cpu", local=True,
                      processes=world, nodes=nodes)
    return Target("cuda", _local_gpu_spec(), "this machine", local=True, processes=world, nodes=nodes)


def _local_gpu_spec() -> GPUSpec:
    """The catalog entry of this machine's GPU, or a spec read from the device itself."""
    import torch

    props = torch.cuda.get_device_properties(0)
    for g in GPUS.values():
        if g.name.lower() in props.name.lower() and abs(g.memory_bytes - props.total_memory) < 8 * 2**30:
            return g
    major, minor = props.major, props.minor
    bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    return GPUSpec("cuda", props.name, props.total_memory, (major, minor), bf16, 100.0,
                   100.0 if bf16 else None, 1000.0, props.total_memory)


def target_for(cfg, gpu: str | None = None, *, local: bool, gpus: int | None = None, nodes: int = 1) -> Target:
    """The target of a command: `local=True` for what runs here (train, eval); else the named GPU
    (`--gpu`, then `train.gpu`), falling back to this machine. `gpus` (per node) x `nodes`: a plan's
    `--gpus/--nodes`; None: as launched here (WORLD_SIZE)."""
    if not local:
        if gpus is None:
            world, launched_nodes = launched_processes()
            gpus, nodes = max(1, world // launched_nodes), launched_nodes
        if gpu:
            return gpu_target(gpu, gpus=gpus, nodes=nodes)
        if cfg.train.gpu:
            return gpu_target(cfg.train.gpu, origin=f"train.gpu={cfg.train.gpu}", gpus=gpus, nodes=nodes)
        if gpus * nodes > 1:
            from dataclasses import replace

            return replace(local_target(cfg.train.device), processes=gpus * nodes, nodes=nodes)
    return local_target(cfg.train.device)
