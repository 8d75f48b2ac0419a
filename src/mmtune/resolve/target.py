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
    # Which optional packages the run's machine has (package_problem): "here" (this machine's: a run that
    # executes here), "gpu-extra" (the packages of `mmtune[gpu]`: a plan for a catalog GPU, by default) or
    # "none" (core packages only). `--assume-installed` on plan / doctor.
    assume_installed: str = "here"

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


ASSUME = ("gpu-extra", "none", "here")
# The packages of `mmtune[gpu]` that change a run's decisions (pyproject.toml's `gpu` extra), by module.
GPU_EXTRA = {"flash_attn": "flash-attn", "liger_kernel": "liger-kernel", "bitsandbytes": "bitsandbytes"}


def check_assume(value: str) -> str:
    if value not in ASSUME:
        from ..errors import ConfigError

        raise ConfigError(f"--assume-installed {value!r} is not one of {', '.join(ASSUME)}", where="--assume-installed",
                          fix="--assume-installed gpu-extra (the packages of mmtune[gpu], the default for a catalog "
                              "GPU), none (core packages only) or here (this machine's)")
    return value


def package_problem(target: Target, module: str) -> str | None:
    """Why optional package `module` is not there where the run executes, or None. A run here: this machine's
    packages. A plan for another GPU: what `assume_installed` says (the default, `gpu-extra`, is the packages
    of `mmtune[gpu]`, what a GPU machine is set up with), not the laptop the plan is made on."""
    import importlib.util

    if target.local or target.assume_installed == "here":
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed here (pip install 'mmtune[gpu]')"
        # found is not usable: a wheel built for another torch / CUDA fails on import ("undefined symbol"),
        # which transformers meets only when the model is built, after the decision picked it
        if target.local and module in GPU_EXTRA:
            from .installed import import_problem, rebuild_hint

            problem = import_problem(module)
            if problem is not None:
                return (f"{module} is installed but does not import here ({problem}); "
                        + rebuild_hint(module, GPU_EXTRA[module]))
        return None
    if target.assume_installed == "gpu-extra" and module in GPU_EXTRA:
        return None
    return f"{module} is assumed absent on the target (--assume-installed {target.assume_installed})"


def packages_line(target: Target) -> str | None:
    """What the plan assumes is installed on the target (a decision of the resolved run), or None for a run here."""
    if target.local:
        return None
    if target.assume_installed == "gpu-extra":
        return (f"mmtune[gpu] assumed on the {target.gpu.name if target.gpu else 'target'}: "
                + ", ".join(GPU_EXTRA.values()))
    if target.assume_installed == "none":
        return "core packages only (" + ", ".join(GPU_EXTRA.values()) + " assumed absent)"
    return "this machine's packages"


def gpu_target(name, origin: str | None = None, *, gpus: int = 1, nodes: int = 1,
               assume_installed: str = "gpu-extra") -> Target:
    """A catalog GPU the run is planned for (unknown names: ConfigError with a did-you-mean), or a
    GPUSpec given directly (what-if plans of a card not in the catalog); `gpus` per node x `nodes`;
    `assume_installed`: the packages of the machine it is on (package_problem)."""
    spec = name if isinstance(name, GPUSpec) else get_gpu(name)
    return Target("cuda", spec, origin or f"--gpu {spec.id if isinstance(name, GPUSpec) else name}", local=False,
                  processes=max(1, gpus) * max(1, nodes), nodes=max(1, nodes),
                  assume_installed=check_assume(assume_installed))


def launched_processes() -> tuple[int, int]:
    """(processes, nodes) of this launch: torchrun / accelerate set WORLD_SIZE and LOCAL_WORLD_SIZE."""
    import os

    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)) or world)
    return world, max(1, world // max(1, local))


def local_target(requested_device: str = "auto") -> Target:
    """This machine: its first CUDA GPU unless the config asks for the CPU (train.device)."""
    import torch

    from . import launch_env as env

    cuda = torch.cuda.is_available()
    # a CPU-only torch sees no GPU whatever the machine has (a CUDA_VISIBLE_DEVICES that hides them is said first)
    gpus = 0 if cuda else env.driver_gpu_count()
    cpu_build = None if cuda else env.cpu_torch_note(torch.__version__, torch.version.cuda,
                                                 getattr(torch.version, "hip", None), gpus)
    hidden = None if cuda else env.hidden_gpus_note()
    if requested_device == "cuda" and not cuda:
        from ..errors import ConfigError

        if cpu_build and not hidden:
            raise ConfigError(f"train.device=cuda but {cpu_build}", where="torch (the installed build)",
                              fix=env.CUDA_TORCH_FIX + ", or train.device=auto (uses the CPU here)")
        raise ConfigError("train.device=cuda but no CUDA GPU is visible" + (f" ({hidden})" if hidden else ""),
                          where="CUDA_VISIBLE_DEVICES" if hidden else "train.device",
                          fix=("unset CUDA_VISIBLE_DEVICES or name the GPUs (CUDA_VISIBLE_DEVICES=0)" if hidden else
                               "train.device=auto (uses the CPU here) or run on a machine with a GPU"))
    world, nodes = launched_processes()
    from .slurm_launch import slurm_step_problem

    slurm = slurm_step_problem()  # an srun step that is not one run (CPU or GPU alike): slurm_launch.py
    if slurm is not None:
        from ..errors import ConfigError

        raise ConfigError(slurm[0], where=slurm[1], fix=slurm[2])
    if requested_device == "cpu" or not cuda:
        origin = "this machine" if requested_device != "cpu" else "train.device=cpu"
        # a CPU build is said only where the driver lists GPUs: on a machine without one it changes nothing
        gpus_unused = cpu_build if cpu_build and gpus else None
        note = None if requested_device == "cpu" else hidden or gpus_unused or env.mps_note()
        return Target("cpu", None, origin + (f"; {note}" if note else ""), local=True, processes=world, nodes=nodes)
    # A launch these GPUs cannot take stops here, before anything is built (launch_env.py).
    for problem, where in ((env.too_many_processes(torch.cuda.device_count()), "LOCAL_WORLD_SIZE (the launcher's processes "
                            "per node)"), (env.no_nccl(world), "WORLD_SIZE (the launcher's processes)")):
        if problem is not None:
            from ..errors import ConfigError

            raise ConfigError(problem[0], where=where, fix=problem[1])
    return Target("cuda", _local_gpu_spec(), "this machine", local=True, processes=world, nodes=nodes)


def catalog_match(device_name: str, total_memory: int) -> GPUSpec | None:
    """The catalog entry of a device torch names `device_name` ("NVIDIA GeForce RTX 4070 Ti SUPER") with
    `total_memory` bytes: the longest catalog name inside it ("RTX 4070 Ti SUPER", not "RTX 4070"; "L40S", not
    "L40"), then the closest memory size (the 8 and 12 GB RTX 3060 share a name); None when no name is in it."""
    name = device_name.lower()
    hits = [g for g in GPUS.values() if g.name.lower() in name and abs(g.memory_bytes - total_memory) < 8 * 2**30]
    return max(hits, key=lambda g: (len(g.name), -abs(g.memory_bytes - total_memory)), default=None)


def _local_gpu_spec() -> GPUSpec:
    """The catalog entry of this machine's GPU, or a spec read from the device itself."""
    import torch

    props = torch.cuda.get_device_properties(0)
    found = catalog_match(props.name, props.total_memory)
    if found is not None:
        return found
    major, minor = props.major, props.minor
    bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    return GPUSpec("cuda", props.name, props.total_memory, (major, minor), bf16, 100.0,
                   100.0 if bf16 else None, 1000.0, props.total_memory)


def target_for(cfg, gpu: str | None = None, *, local: bool, gpus: int | None = None, nodes: int = 1,
               assume_installed: str = "gpu-extra") -> Target:
    """The target of a command: `local=True` for what runs here (train, eval); else the named GPU
    (`--gpu`, then `train.gpu`), falling back to this machine. `gpus` (per node) x `nodes`: a plan's
    `--gpus/--nodes`; None: as launched here (WORLD_SIZE). `assume_installed`: a named GPU's packages."""
    if not local:
        if gpus is None:
            world, launched_nodes = launched_processes()
            gpus, nodes = max(1, world // launched_nodes), launched_nodes
        if gpu:
            return gpu_target(gpu, gpus=gpus, nodes=nodes, assume_installed=assume_installed)
        if cfg.train.gpu:
            return gpu_target(cfg.train.gpu, origin=f"train.gpu={cfg.train.gpu}", gpus=gpus, nodes=nodes,
                              assume_installed=assume_installed)
        if gpus * nodes > 1:
            from dataclasses import replace

            return replace(local_target(cfg.train.device), processes=gpus * nodes, nodes=nodes)
    return local_target(cfg.train.device)
