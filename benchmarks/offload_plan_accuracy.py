"""`train.offload=optimizer` planned vs a real run on 2 CPU gloo ranks: the host bytes each rank holds for the
offloaded state, and the CPU optimizer step time.

Each row plans the run for 2 ranks on this machine (`predict(cfg, gpus=2)`: plan/offload.py's host bytes per
rank by class, and its CPU optimizer step at the assumed HOST_ADAM_GBS), then runs it for real: the run built
as `mmtune train` builds it on 2 gloo ranks launched by torchrun (FSDP2 with CPUOffloadPolicy, or DeepSpeed
ZeRO-2 with offload_optimizer and DeepSpeedCPUAdam), three optimizer steps of the loop's own `optimizer_step`,
then counted through the optimizer's public API: each parameter the optimizer steps (its local shard / the
fp32 partition DeepSpeed hands it), that parameter's gradient and its state tensors; under FSDP also the frozen
parameters' shards (CPUOffloadPolicy moves every shard). The optimizer step is timed by torch's optimizer
step hooks (register_step_pre_hook / post_hook), the median of the steps after the first (the first creates
the state). What a CPU run cannot measure, it does not report: the GPU bytes saved and the PCIe time (nothing
crosses PCIe between two CPU ranks); those rows are planned only (docs/distributed.md#optimizer-offload).

    python benchmarks/offload_plan_accuracy.py [--only NAME] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

RESULT_KEYS = ("rows", "runs", "host_bytes_max_abs_error_pct", "host_adam_gbs_assumed", "adam_throughput", "measure_s")

RUNS = [
    ("fsdp-text-full", ["model.name=tiny/qwen2", "adapter.method=full", "train.strategy=fsdp"]),
    ("fsdp-image-lora", ["model.name=tiny/qwen2-vl", "adapter.method=lora", "train.strategy=fsdp"]),
    ("zero2-text-full", ["model.name=tiny/qwen2", "adapter.method=full", "train.strategy=zero2"]),
    ("zero2-image-lora", ["model.name=tiny/qwen2-vl", "adapter.method=lora", "train.strategy=zero2"]),
]
COMMON = ["data.max_length=256", "train.precision=fp32", "train.device=cpu", "train.grad_accum=1",
          "train.offload=optimizer", "train.max_steps=3", "model.gradient_checkpointing=false"]
STEPS = 3


def config(overrides):
    from mmtune.config import load_config

    return load_config(None, COMMON + overrides)


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _nbytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (DTensors: this rank's local storage); views of one buffer
    (FSDP2's gradient shards, DeepSpeed's flat partitions) counted once."""
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        st = _local(t).untyped_storage()
        if st.data_ptr() not in seen and st.nbytes():
            seen.add(st.data_ptr())
            total += st.nbytes()
    return total


def measure(cfg) -> dict:
    """On each rank: the run built as train builds it, STEPS loop steps, then this rank's host bytes and step times."""
    import torch

    from mmtune.build import build_run
    from mmtune.loss import to_device
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.planner import resolve_for_plan
    from mmtune.train.step import optimizer_step

    batch = worst_case_batch(resolve_for_plan(cfg), declared=None).micro_batch
    run = build_run(cfg, with_data=False)
    inner = getattr(run.model, "basic_optimizer", None) or run.optimizer.optimizer  # the torch optimizer that steps
    # ZeRO-Offload steps the optimizer once per parameter group (its `_optimizer_step(i)` narrows param_groups to
    # group i): the hooks record every call, summed per loop step.
    calls, t0, steps = [], [0.0], []

    def pre(*a):  # the gradients the step reads exist now (zeroed / dropped after it)
        calls.append([_nbytes(p.grad for g in inner.param_groups for p in g["params"]), 0.0])
        t0[0] = time.perf_counter()

    inner.register_step_pre_hook(pre)
    inner.register_step_post_hook(lambda *a: calls[-1].__setitem__(1, time.perf_counter() - t0[0]))
    b = to_device(batch, run.accelerator.device)
    for _ in range(STEPS):
        optimizer_step(run.model, run.optimizer, run.scheduler, [b], accelerator=run.accelerator,
                       max_grad_norm=run.cfg.train.max_grad_norm, trainable_params=run.trainable_params,
                       loss_impl=run.cfg.train.loss_impl)
        steps.append((sum(c[0] for c in calls), sum(c[1] for c in calls)))
        calls.clear()
    # ZeRO-2 offload also keeps a 16-bit copy of each partition on the host to copy the update back to the
    # device (DeepSpeed 0.19 stage_1_and_2: param_buffer_of_bit16_for_cpu_offload_groups); read here, by its name,
    # because no public API lists it.
    bit16 = _nbytes(getattr(run.optimizer.optimizer, "param_buffer_of_bit16_for_cpu_offload_groups", None) or [])
    stepped = [p for g in inner.param_groups for p in g["params"]]
    state = [v for p in stepped for v in inner.state.get(p, {}).values() if isinstance(v, torch.Tensor)]
    ids = {id(p) for p in stepped}
    frozen = [p for p in run.model.parameters() if id(p) not in ids and not p.requires_grad] \
        if run.resolved.strategy == "fsdp" else []
    steady = sorted(t for _, t in steps[1:])  # the first step creates the state
    return {"params": _nbytes(stepped) + _nbytes(frozen), "grads": max(g for g, _ in steps), "state": _nbytes(state),
            "bit16_buffer": bit16, "step_s": steady[len(steady) // 2], "optimizer": type(inner).__name__}


def adam_throughput(numel: int = 1 << 24, repeats: int = 5) -> dict:
    """GB/s of host memory an AdamW step moves on this machine (28 bytes per fp32 element over the step time), for
    DeepSpeedCPUAdam and torch's AdamW, one process, one `numel`-element parameter: what HOST_ADAM_GBS assumes."""
    import torch

    out = {}
    makers = {"torch AdamW": lambda ps: torch.optim.AdamW(ps, lr=1e-3)}
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        makers["DeepSpeedCPUAdam"] = lambda ps: DeepSpeedCPUAdam(ps, lr=1e-3, adamw_mode=True)
    except ImportError:
        pass
    for name, make in makers.items():
        p = torch.nn.Parameter(torch.randn(numel))
        p.grad = torch.randn(numel)
        opt = make([p])
        opt.step()  # creates the state
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            opt.step()
            ts.append(time.perf_counter() - t)
        s = sorted(ts)[len(ts) // 2]
        out[name] = {"numel": numel, "step_s": s, "gbs": 28 * numel / s / 1e9, "threads": torch.get_num_threads()}
    return out


def worker(names: list[str], out: Path) -> None:
    import torch.distributed as dist

    rows = {}
    for name, ov in RUNS:
        if name in names:
            m = measure(config(ov))  # starts the process group (build_run)
            got = [None] * dist.get_world_size()
            dist.all_gather_object(got, m)
            rows[name] = got
    if not dist.is_initialized() or dist.get_rank() == 0:
        out.write_text(json.dumps(rows))
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def measure_two_ranks(names: list[str]) -> dict:
    from _two_ranks import measure_two_ranks as on_two_ranks

    return on_two_ranks(__file__, names)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--out", help="also write the JSON results to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    from _provenance import provenance, write_results

    started = provenance()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    names = args.only or [r[0] for r in RUNS]
    if args.worker:
        worker(names, Path(args.worker))
        return 0
    from mmtune.plan.offload import HOST_ADAM_GBS, TORCH_CPU_ADAM_SLOWDOWN
    from mmtune.plan.planner import predict

    t0 = time.perf_counter()
    measured = measure_two_ranks(names)
    measure_s = time.perf_counter() - t0
    rows = []
    for name, ov in RUNS:
        if name not in names:
            continue
        res = predict(config(ov), gpus=2, plan_eval=False)
        o = res.offload
        planned = dict(o["parts"])
        real = measured[name]
        host_real = max(m["params"] + m["grads"] + m["state"] + m["bit16_buffer"] for m in real)
        err = 100.0 * (o["host_bytes_per_rank"] - host_real) / host_real
        step_real = max(m["step_s"] for m in real)
        rows.append({"name": name, "mode": o["mode"], "optimizer": real[0]["optimizer"],
                     "planned_host_bytes_per_rank": o["host_bytes_per_rank"], "planned_parts": planned,
                     "measured_per_rank": real, "host_error_pct": err,
                     "planned_cpu_optimizer_s": o["cpu_optimizer_s"], "measured_cpu_optimizer_s": step_real,
                     "trainable_params": res.trainable_params})
        print(f"{name:18s} {o['mode']:13s} host per rank planned {o['host_bytes_per_rank']:>11,d} measured "
              f"{host_real:>11,d} ({err:+.1f} %); CPU optimizer step planned {o['cpu_optimizer_s'] * 1e3:.2f} ms, "
              f"measured {step_real * 1e3:.2f} ms ({real[0]['optimizer']}, {res.trainable_params:,d} trainable)", flush=True)
        print(f"{'':18s} planned {planned}; measured per rank "
              + "; ".join(f"params {m['params']:,d} grads {m['grads']:,d} state {m['state']:,d} "
                          f"16-bit copy {m['bit16_buffer']:,d}" for m in real), flush=True)
    adam = adam_throughput()
    for k, v in adam.items():
        print(f"{k}: {v['numel']:,d} fp32 elements stepped in {v['step_s'] * 1e3:.1f} ms = {v['gbs']:.1f} GB/s "
              f"({v['threads']} threads; the plan assumes "
              f"{HOST_ADAM_GBS / (1 if k == 'DeepSpeedCPUAdam' else TORCH_CPU_ADAM_SLOWDOWN):g})")
    summary = {"adam_throughput": adam, "runs": len(rows),
               "host_bytes_max_abs_error_pct": max(abs(r["host_error_pct"]) for r in rows),
               "host_adam_gbs_assumed": HOST_ADAM_GBS, "measure_s": round(measure_s, 1)}
    if args.out:
        write_results(args.out, {"rows": rows, **summary}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
