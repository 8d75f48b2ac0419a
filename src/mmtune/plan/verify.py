"""`mmtune plan CONFIG --verify`: run the planned step for real on this machine's GPU and compare.

The model is the run's architecture at full size from the same config the plan uses (a folder, the hub
cache or an embedded public config), with random weights built on the GPU: nothing is downloaded. The
batch is the plan's worst-case batch. The loop's own `optimizer_step` runs `warmup` steps (the first
creates the optimizer state) and then `steps` timed steps, each of `grad_accum` micro-batches as the run
does; `torch.cuda.max_memory_allocated` / `max_memory_reserved` are read over all of them, and the step
time is the median of the timed steps (synchronised). Printed against the plan's prediction for the
same card, so any user can check the planner on theirs.

`measure_run` is the measurement itself; on a CPU (tests, no GPU) it measures the CPU allocator's peak
with torch.profiler as the accuracy benchmark does (measure.py), and the same step times.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field

from ..errors import MMTuneError


@dataclass
class Measurement:
    device: str
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None  # CUDA only
    step_times_s: list = field(default_factory=list)

    @property
    def step_time_s(self) -> float:
        return statistics.median(self.step_times_s) if self.step_times_s else 0.0


def needs_cuda_error(what: str = "mmtune plan --verify") -> MMTuneError:
    return MMTuneError(f"{what} runs the planned step for real and needs a CUDA GPU; this machine has none "
                       "(torch.cuda.is_available() is False)", where="--verify",
                       fix="run it on the machine with the GPU you plan for; `mmtune plan` without --verify "
                           "predicts without one")


def measure_run(resolved, micro_batch: dict, *, device, warmup: int = 2, steps: int = 3) -> Measurement:
    """Build the run's model on `device` (random weights), run `warmup` + `steps` optimizer steps of
    `grad_accum` micro-batches each, and measure the peak memory and the timed steps' durations."""
    import torch

    from ..build import build_model_and_adapters
    from ..optim import make_optimizer
    from ..train.schedule import make_scheduler
    from ..train.step import optimizer_step
    from .execute import PlanAccelerator
    from .measure import cpu_peak
    from .planner import with_aux

    cfg = resolved.cfg
    dev = torch.device(device)
    torch.manual_seed(cfg.train.seed)
    loaded, adapters = build_model_and_adapters(resolved, device=dev, random_weights=True)
    model = adapters.model.to(dev)
    # the plan's step: its auxiliary losses at full weight and its loss implementation, run for real here
    aux, micro_batch = with_aux(cfg, loaded.model, loaded.processor, micro_batch)
    optimizer = make_optimizer(adapters.param_groups, cfg.train)
    scheduler = make_scheduler(optimizer, warmup=0, total=warmup + steps + 1, kind="constant")
    trainable = [p for g in adapters.param_groups for p in g["params"] if p.requires_grad]
    from ..build import run_objective
    from ..loss import to_device

    objective = run_objective(cfg, model, resolved)  # the run's (dpo: its reference, a frozen copy for full)
    batch = to_device(micro_batch, dev)
    acc = PlanAccelerator(resolved.compute_dtype, device=dev)
    mbs = [batch] * cfg.train.grad_accum

    def one_step():
        optimizer_step(model, optimizer, scheduler, mbs, accelerator=acc, max_grad_norm=cfg.train.max_grad_norm,
                       trainable_params=trainable, aux=aux, step=max((t.start for t in aux), default=0),
                       loss_impl=cfg.train.loss_impl, objective=objective)

    times: list[float] = []
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            one_step()
            torch.cuda.synchronize(dev)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        return Measurement("cuda", torch.cuda.max_memory_allocated(dev), torch.cuda.max_memory_reserved(dev), times)

    def warm_up():
        for _ in range(warmup):
            one_step()

    baseline, peak = cpu_peak(model, batch, warm_up, reference=objective.reference_model)
    for _ in range(steps):  # timed outside the profiler, which slows every op
        t0 = time.perf_counter()
        one_step()
        times.append(time.perf_counter() - t0)
    return Measurement("cpu", baseline + peak, None, times)


@dataclass
class Verification:
    model: str
    gpu_id: str
    device_name: str
    predicted: dict
    measured: dict
    error_pct: dict
    decisions: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _pct(pred, meas) -> float | None:
    return None if not meas else round(100.0 * (pred - meas) / meas, 2)


def verify(cfg, *, gpu: str | None, declared=None, warmup: int = 2, steps: int = 3, device: str | None = None,
           layers: int | None = None, plan=None) -> Verification:
    """Plan the run for `gpu` (else train.gpu), then measure it on `device` (default: cuda; a CPU device is
    refused unless given explicitly, which the tests do with a tiny twin). `layers`: the decoder cut to
    that many layers in the plan and the measured model alike (a card that cannot hold the full model).
    `plan`: the plan of this same run (cfg, gpu, declared, layers), made already by the caller: the GPU harness
    (benchmarks/gpu) records the prediction before measuring, so a run that runs out of memory keeps it."""
    import torch

    from ..models.model_config import DECODER_LAYERS

    if layers is not None and layers < 1:
        raise MMTuneError(f"--layers must be >= 1 (got {layers})", where="--layers", fix="e.g. --layers 4")
    if device is None and not torch.cuda.is_available():
        raise needs_cuda_error()
    token = DECODER_LAYERS.set(layers)
    try:
        v = _verify(cfg, gpu=gpu, declared=declared, warmup=warmup, steps=steps, device=device, plan=plan)
    finally:
        DECODER_LAYERS.reset(token)
    if layers is not None:
        v.decisions.append(f"verify: decoder cut to {layers} layers (--layers) in the plan and the measured model")
    return v


def _verify(cfg, *, gpu, declared, warmup, steps, device, plan=None) -> Verification:
    import torch

    from ..resolve import local_target, resolve_run
    from .batch import worst_case_batch
    from .planner import predict, resolve_for_plan

    device = device or "cuda"  # verify() refused a missing CUDA already
    target = gpu or cfg.train.gpu
    if device.startswith("cuda") and not target:
        raise MMTuneError("--verify compares with the plan for a catalogued GPU: name it", where="--gpu",
                          fix="e.g. --gpu a100-80gb (see docs/plan.md for the names)")
    if plan is None:
        plan = predict(cfg, gpu=target, declared=declared, plan_eval=False)
    run = resolve_run(cfg, local_target(device), for_training=False)
    batch = worst_case_batch(resolve_for_plan(cfg, target), declared=declared).micro_batch
    m = measure_run(run, batch, device=device, warmup=warmup, steps=steps)
    pred_alloc = plan.peak_allocated_bytes if m.device == "cuda" else plan.tensor_peak_bytes
    predicted = {"peak_allocated_bytes": pred_alloc, "peak_reserved_bytes": plan.peak_reserved_bytes,
                 "step_time_s": plan.step_time_s}
    measured = {"peak_allocated_bytes": m.peak_allocated_bytes, "peak_reserved_bytes": m.peak_reserved_bytes,
                "step_time_s": m.step_time_s, "step_times_s": m.step_times_s, "device": m.device}
    errors = {"peak_allocated": _pct(pred_alloc, m.peak_allocated_bytes),
              "peak_reserved": _pct(plan.peak_reserved_bytes, m.peak_reserved_bytes),
              "step_time": _pct(plan.step_time_s, m.step_time_s) if m.device == "cuda" else None}
    name = torch.cuda.get_device_name(torch.device(device)) if m.device == "cuda" else "CPU"
    return Verification(cfg.model.name, plan.gpu_id, name, predicted, measured, errors,
                        decisions=[f"verify: random weights, {warmup} warm-up + {steps} timed steps of "
                                   f"{cfg.train.grad_accum} micro-batch(es) on {name}"])
