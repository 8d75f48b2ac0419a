"""FSDP2 (`torch.distributed.fsdp.fully_shard`) for `train.strategy=fsdp`: wrapping, state dicts.

Wrapping: one FSDP unit per block of every repeated stack in the vision / audio towers and the decoder
(each child of an `nn.ModuleList` whose path lies in one of those components: Qwen's `visual.blocks.N`,
`language_model.layers.N`, CLIP's `encoder.layers.N`, ...), then the root for everything left
(embeddings, projector, norms, lm_head). A block's weights are gathered for its forward and backward
only, so the peak holds about one block's full weights beyond the shards. LoRA weights live inside the
blocks they adapt and are sharded with them; frozen weights are sharded too and get no gradient. The
mixed-precision policy comes from the resolved precision: weights gathered in the compute dtype,
gradients reduced in fp32. Activation checkpointing is the model's own (non-reentrant, see build.py),
which runs inside the units.

Parameters are replaced by sharded ones (DTensors), so whatever held the old parameter objects (the
optimizer's groups, the trainable list) is mapped again by name (`remap`).
"""

from __future__ import annotations

DEEP_COMPONENTS = ("vision", "audio", "decoder")


def shard_units(model, family) -> list[tuple[str, object]]:
    """(name, module) of each block FSDP wraps on its own: the children of the outermost ModuleLists that
    lie in a vision, audio or decoder component."""
    from torch import nn

    from .adapters import component_of

    units: list[tuple[str, object]] = []
    taken: list[str] = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or any(name.startswith(t + ".") for t in taken):
            continue
        if "lora_" in name or component_of(family, name + ".") not in DEEP_COMPONENTS:
            continue
        units += [(f"{name}.{i}", child) for i, child in enumerate(module)]
        taken.append(name)
    return units


def mixed_precision_policy(precision: str):
    """Weights gathered in the compute dtype; gradients reduced (and the fp32 trainable shards updated)
    in fp32. fp32 runs need no policy."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision == "fp32":
        return MixedPrecisionPolicy()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def offload_policy(device):
    """train.offload=optimizer (resolve/offload.py): FSDP2's CPUOffloadPolicy, the shards in host memory,
    pinned when there is a GPU to copy them to (pinning needs CUDA; a CPU run's shards are host memory already)."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    return CPUOffloadPolicy(pin_memory=device.type == "cuda")


def apply_fsdp(model, family, precision: str, device, offload: bool = False) -> str:
    """Shard `model` in place over every rank of the default process group; returns what was done.
    `offload`: every unit's shards (parameters, gradients, and so the optimizer's state) in host memory."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import OffloadPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    mp = mixed_precision_policy(precision)
    policy = offload_policy(device) if offload else OffloadPolicy()
    units = shard_units(model, family)
    for _, module in units:
        fully_shard(module, mesh=mesh, mp_policy=mp, offload_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=mp, offload_policy=policy)
    stacks = sorted({n.rsplit(".", 1)[0] for n, _ in units})
    return (f"FSDP2: {len(units)} blocks wrapped one by one ({', '.join(stacks) or 'none'}), then the root; "
            f"sharded over {dist.get_world_size()} ranks; mixed precision "
            + ("off (fp32)" if precision == "fp32" else f"{precision} weights, fp32 gradient reduction")
            + (f"; CPUOffloadPolicy: parameter, gradient and optimizer-state shards in host memory"
               f"{' (pinned)' if device.type == 'cuda' else ''}, the optimizer steps on the CPU" if offload else ""))


def names_of(model) -> dict[int, str]:
    """id(parameter) -> name, taken before sharding replaces the parameter objects."""
    return {id(p): n for n, p in model.named_parameters()}


def remap(param_groups: list[dict], old_names: dict[int, str], model) -> list[dict]:
    """The optimizer groups with each parameter replaced by the sharded one of the same name."""
    new = dict(model.named_parameters())
    return [{**g, "params": [new[old_names[id(p)]] for p in g["params"]]} for g in param_groups]


def is_sharded(model) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def full_state_dict(model, *, trainable_only: bool) -> dict:
    """The unsharded state dict on the CPU, gathered from every rank (a collective: every rank calls it);
    rank 0 gets the tensors, the others an empty dict. A plain model: its own tensors."""
    if not is_sharded(model):
        params = dict(model.named_parameters())
        sd = model.state_dict()
        keep = {n for n, p in params.items() if p.requires_grad} if trainable_only else set(sd)
        return {n: t.detach().cpu().contiguous() for n, t in sd.items() if n in keep}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {n: t.contiguous() for n, t in sd.items() if not trainable_only or n in trainable}


OFFLOAD_BACKEND = "cpu:gloo,cuda:nccl"


def start_offload_process_group(resolved, timeout=None) -> None:
    """FSDP2 CPU offload on GPUs: the gradient shards are CPU DTensors, so gradient clipping all-reduces CPU
    tensors, which NCCL cannot ("No backend type associated with device type cpu", pytorch#148532). The
    process group is started here with gloo for CPU tensors beside NCCL, before accelerate would start an
    NCCL-only one (it keeps a group that exists). A group already started without a CPU backend is refused
    with the way out. CPU runs (gloo already) and every other run are left alone. Not yet run on GPUs here:
    this session had none; the doctor's MM078 states the same rule."""
    if resolved.offload != "fsdp" or resolved.device != "cuda" or resolved.target.processes <= 1:
        return
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend=OFFLOAD_BACKEND, **({"timeout": timeout} if timeout is not None else {}))
        return
    backend = str(dist.get_backend())
    if "gloo" not in backend and "cpu" not in backend and resolved.cfg.train.max_grad_norm:
        from .errors import ConfigError

        raise ConfigError(f"FSDP2 CPU offload needs a process group that can all-reduce CPU tensors (gradient "
                          f"clipping); this one was started with {backend!r}", where="train.offload",
                          fix=f'init_process_group("{OFFLOAD_BACKEND}") where it is started, or train.max_grad_norm=null')
