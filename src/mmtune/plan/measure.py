"""Measure the real peak of the same step, independently of the planner (for the accuracy benchmark).

CPU: torch.profiler memory events (`profile_memory=True`) list every allocation and free of the CPU
allocator in order; the peak is the largest running sum, added to the bytes that were live before the
step (weights, buffers, 4-bit quant state, the batch). CUDA: `torch.cuda.max_memory_allocated` and
`max_memory_reserved` after a reset. The step is the loop's own `optimizer_step`, twice, as planned.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Measured:
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None
    baseline_bytes: int
    device: str


def _storage_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        st = t.untyped_storage()
        key = st.data_ptr()
        if key in seen or st.nbytes() == 0:
            continue
        seen.add(key)
        total += st.nbytes()
    return total


def _quant_state_tensors(model):
    """bnb's quant state, which no parameter or buffer holds: 4-bit absmax / codes (on the weight, and on the
    layer, where it stays whole on every rank under FSDP2) and int8 row scales (SCB, on the weight or the
    layer's matmul state)."""
    import torch

    out = []
    for m in model.modules():
        for holder in (m, getattr(m, "state", None), getattr(m, "weight", None)):
            scb = getattr(holder, "SCB", None)
            if isinstance(scb, torch.Tensor):
                out.append(scb)
    states = [getattr(p, "quant_state", None) for p in model.parameters()]
    states += [getattr(m, "quant_state", None) for m in model.modules()]
    for qs in states:
        if qs is None:
            continue
        for name in ("absmax", "code"):
            if getattr(qs, name, None) is not None:
                out.append(getattr(qs, name))
        nested = getattr(qs, "state2", None)
        if nested is not None:
            out += [nested.absmax, nested.code]
        if getattr(qs, "offset", None) is not None:
            out.append(qs.offset)
    return out


def measure_step(run, micro_batch: dict, *, steps: int = 2) -> Measured:
    """A real step of the run on this machine (a RunConfig is resolved for this machine first)."""
    import torch

    from ..build import build_model_and_adapters, make_accelerator
    from ..optim import make_optimizer
    from ..resolve import ResolvedRun, local_target, resolve_run
    from ..train.schedule import make_scheduler
    from ..train.step import optimizer_step

    resolved = run if isinstance(run, ResolvedRun) else resolve_run(run, local_target(run.train.device),
                                                                    for_training=True)
    cfg = resolved.cfg
    accelerator = make_accelerator(resolved)
    torch.manual_seed(cfg.train.seed)
    _, adapters = build_model_and_adapters(resolved, device=accelerator.device)
    model = adapters.model
    from ..build import run_objective

    objective = run_objective(cfg, model, resolved)  # the run's, dpo's frozen copy included
    reference = objective.reference_model
    optimizer = make_optimizer(adapters.param_groups, cfg.train)
    model, optimizer = accelerator.prepare(model, optimizer)
    scheduler = make_scheduler(optimizer, warmup=0, total=10, kind="constant")
    trainable = [p for g in adapters.param_groups for p in g["params"] if p.requires_grad]
    dev = accelerator.device
    from ..loss import to_device

    batch = to_device(micro_batch, dev)
    n_mb = min(cfg.train.grad_accum, 2)

    def run():
        for i in range(steps):  # the planner's schedule: 1 micro-batch, then min(grad_accum, 2)
            optimizer_step(model, optimizer, scheduler, [batch] * (n_mb if i == steps - 1 else 1), accelerator=accelerator,
                           max_grad_norm=cfg.train.max_grad_norm, trainable_params=trainable,
                           loss_impl=cfg.train.loss_impl, objective=objective)

    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base_alloc = torch.cuda.memory_allocated()
        run()
        torch.cuda.synchronize()
        return Measured(torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved(), base_alloc, "cuda")
    baseline, peak = cpu_peak(model, batch, run, reference=reference)
    return Measured(baseline + peak, None, baseline, "cpu")


def cpu_peak(model, batch: dict, run, reference=None) -> tuple[int, int]:
    """(bytes live before `run`: weights, buffers, 4-bit quant state, the batch, dpo's frozen reference copy; the
    CPU allocator's peak above them while `run()` runs). Serves measure_step and `plan --verify` on a CPU."""
    import torch

    from ..compat.torch_internals import cpu_allocator_peak

    state = list(model.parameters()) + list(model.buffers()) + _quant_state_tensors(model)
    if reference is not None:
        state += list(reference.parameters()) + list(reference.buffers())
    baseline = _storage_bytes(state) + _storage_bytes([v for v in batch.values() if isinstance(v, torch.Tensor)])
    return baseline, cpu_allocator_peak(run)


def measure_sharded_step(cfg, micro_batch: dict, *, steps: int = 2) -> Measured:
    """This rank's peak in a real multi-rank run (launched by torchrun; `train.strategy` decides the
    sharding, e.g. fsdp), on the same batch and schedule as measure_step: the run built as `mmtune train`
    builds it (FSDP2 applied, the optimizer over the shards), the loop's own `optimizer_step`. The
    baseline is what this rank holds before the step: its parameter shards (the padded local storage),
    buffers and the batch. CPU only (the planner's accuracy is checked on CPU ranks with gloo)."""
    from ..build import build_run
    from ..compat.torch_internals import cpu_allocator_peak
    from ..loss import to_device
    from ..train.step import optimizer_step

    run = build_run(cfg, with_data=False)
    cfg = run.cfg
    dev = run.accelerator.device
    batch = to_device(micro_batch, dev)
    n_mb = min(cfg.train.grad_accum, 2)

    def steps_():
        for i in range(steps):  # the planner's schedule: 1 micro-batch, then min(grad_accum, 2)
            optimizer_step(run.model, run.optimizer, run.scheduler, [batch] * (n_mb if i == steps - 1 else 1),
                           accelerator=run.accelerator, max_grad_norm=cfg.train.max_grad_norm,
                           trainable_params=run.trainable_params, loss_impl=cfg.train.loss_impl)

    local = [getattr(p, "to_local", lambda p=p: p)() for p in run.model.parameters()]  # DTensor -> this rank's shard
    baseline = _storage_bytes(local + list(run.model.buffers())) + _storage_bytes(list(batch.values()))
    return Measured(baseline + cpu_allocator_peak(steps_), None, baseline, dev.type)
