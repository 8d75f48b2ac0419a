"""train.prefetch: a background thread encodes the next step's micro-batches while this step computes.
Decided once in the resolved run with its reason (on where a core is spare, never for grpo, whose step uses
the processor); the loop gets the same micro-batches in the same order, so a run with the thread trains the
same losses bit for bit, evaluates and checkpoints the same, and resumes exactly."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.data.workers import LoaderPlan
from mmtune.resolve.decisions import decide_prefetch
from mmtune.resolve.target import gpu_target, local_target
from mmtune.train.feed import open_feed
from mmtune.train.loop import train
from mmtune.train.prefetch import Prefetched


def _rows(out: Path, kind: str) -> list[dict]:
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


def test_prefetch_is_decided_once_with_a_reason(tiny_vl_config):
    cfg = load_config(tiny_vl_config(train={"grad_accum": 3}), [])
    cpu = local_target("cpu")
    plan, d = decide_prefetch(cfg, LoaderPlan(), cpu, cores=4, load=0.5, torch_threads=1)
    assert plan.thread_prefetch == 3 and "one step" in d.value and "load average 0.50" in d.reason
    assert plan.loader_kwargs() == {"num_workers": 0}  # not a DataLoader argument
    busy, d = decide_prefetch(cfg, LoaderPlan(), cpu, cores=2, load=3.0, torch_threads=1)
    assert busy.thread_prefetch == 0 and d.value == "none" and "no core to spare" in d.reason
    own, _ = decide_prefetch(cfg, LoaderPlan(), cpu, cores=2, load=0.0, torch_threads=2)  # the step's threads
    assert own.thread_prefetch == 0
    gpu, d = decide_prefetch(cfg, LoaderPlan(), gpu_target("a100-80gb"), cores=2)
    assert gpu.thread_prefetch == 3 and "GPU" in d.reason
    asked = load_config(tiny_vl_config(train={"prefetch": "none"}), [])
    plan, d = decide_prefetch(asked, LoaderPlan(), cpu, cores=8, load=0.0, torch_threads=1)
    assert plan.thread_prefetch == 0 and d.reason.startswith("requested")
    grpo = load_config(tiny_vl_config(train={"objective": "grpo"}), [])
    plan, d = decide_prefetch(grpo, LoaderPlan(), cpu, cores=8, load=0.0, torch_threads=1)
    assert plan.thread_prefetch == 0 and "grpo" in d.reason
    # A CPU run's workers hand over by value: the thread receives them, whatever the cores (it only unpickles).
    workers = LoaderPlan(num_workers=1, start_method="spawn")
    got, d = decide_prefetch(cfg, workers, cpu, cores=2, load=3.0, torch_threads=2)
    assert got.thread_prefetch == 3 and got.num_workers == 1 and "receives the workers'" in d.value
    assert "never uses the processor" in d.reason
    got, d = decide_prefetch(asked, workers, cpu, cores=8, load=0.0, torch_threads=1)
    assert got.thread_prefetch == 0 and d.value == "none"
    pinned = LoaderPlan(num_workers=1, start_method="forkserver", pin_memory=True)  # CUDA: torch's pin-memory thread
    assert decide_prefetch(cfg, pinned, gpu_target("a100-80gb"), cores=8) == (pinned, None)


def test_prefetched_keeps_order_and_raises_where_the_loop_reads():
    def items():
        yield from range(5)
        raise ValueError("record 5 is broken")

    it = Prefetched(items(), depth=2)
    assert [next(it) for _ in range(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="record 5"):
        next(it)
    it.close()


def _with_thread(run):
    run.resolved = dataclasses.replace(run.resolved, loader=dataclasses.replace(run.resolved.loader, thread_prefetch=2))
    return run


def test_a_run_with_the_thread_trains_evaluates_and_resumes_the_same(tiny_vl_config, tmp_path):
    """4 steps without the thread == 2 steps with it, stop (as a kill would), 2 more resumed with it: the same
    losses and eval losses exactly (dropout on, eval every 2 steps, a checkpoint every 2)."""
    base = dict(train={"max_steps": 4, "save_every": 2, "grad_accum": 2, "prefetch": "none"},
                adapter={"dropout": 0.1}, eval={"every": 2})
    plain = load_config(tiny_vl_config(**base), [f"output_dir={tmp_path / 'plain'}"])
    train(build_run(plain))
    threaded = load_config(tiny_vl_config(**base), [f"output_dir={tmp_path / 'thread'}"])
    _, loader = open_feed(_with_thread(build_run(threaded)), {"epoch": 0, "index": 0})
    assert isinstance(loader, Prefetched)  # the runs below do use the thread
    loader.close()
    assert train(_with_thread(build_run(threaded)), stop_after=2) is None
    train(_with_thread(build_run(threaded)))
    for kind, key in (("train", "loss"), ("eval", "eval_loss")):
        want = [r[key] for r in _rows(tmp_path / "plain", kind)]
        assert want and [r[key] for r in _rows(tmp_path / "thread", kind)] == want
