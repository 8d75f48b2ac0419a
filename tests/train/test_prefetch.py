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
from mmtune.resolve.data_loading import decide_prefetch
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
    assert not plan.thread_in_backward  # a free core: the thread works beside the whole step
    # A core beyond torch's threads but a busy machine (the run's own step counts in the load): the thread encodes
    # only in the step's backward, whose kernels run without the GIL.
    busy, d = decide_prefetch(cfg, LoaderPlan(), cpu, cores=2, load=3.0, torch_threads=1)
    assert busy.thread_prefetch == 3 and busy.thread_in_backward and "during the step's backward" in d.value
    assert "kernels without the GIL" in d.reason and "load average 3.00" in d.reason
    own, d = decide_prefetch(cfg, LoaderPlan(), cpu, cores=2, load=0.0, torch_threads=2)  # the step's threads
    assert own.thread_prefetch == 0 and d.value == "none" and "no core beside the step's own threads" in d.reason
    gpu, d = decide_prefetch(cfg, LoaderPlan(), gpu_target("a100-80gb"), cores=2)
    assert gpu.thread_prefetch == 3 and "GPU" in d.reason and not gpu.thread_in_backward
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


def test_a_thread_that_encodes_in_the_backward_starts_only_in_an_open_window():
    import threading
    import time

    pulled = []

    def items():
        for i in range(6):
            pulled.append((i, threading.current_thread().name))
            yield i

    it = Prefetched(items(), depth=2, in_backward=True)
    assert next(it) == 0  # nothing queued yet: the loop's own thread reads it
    time.sleep(0.2)
    assert len(pulled) == 1  # the two queued items wait for a window: the forward runs alone
    with it.open_window():  # a backward
        for _ in range(200):
            if len(pulled) == 3:
                break
            time.sleep(0.01)
    assert [i for i, _ in pulled] == [0, 1, 2] and all(n.startswith("mmtune-prefetch") for _, n in pulled[1:])
    assert [next(it) for _ in range(5)] == [1, 2, 3, 4, 5]  # the loop waiting opens the window itself: no deadlock
    it.settle()  # idle, whatever is queued (evaluation may use the processor now)
    it.close()


def _with_thread(run, in_backward=False):
    loader = dataclasses.replace(run.resolved.loader, thread_prefetch=2, thread_in_backward=in_backward)
    run.resolved = dataclasses.replace(run.resolved, loader=loader)
    return run


@pytest.mark.parametrize("in_backward", [False, True], ids=["beside-the-step", "in-the-backward"])
def test_a_run_with_the_thread_trains_evaluates_and_resumes_the_same(tiny_vl_config, tmp_path, in_backward):
    """4 steps without the thread == 2 steps with it, stop (as a kill would), 2 more resumed with it: the same
    losses and eval losses exactly (dropout on, eval every 2 steps, a checkpoint every 2)."""
    base = dict(train={"max_steps": 4, "save_every": 2, "grad_accum": 2, "prefetch": "none"},
                adapter={"dropout": 0.1}, eval={"every": 2})
    plain = load_config(tiny_vl_config(**base), [f"output_dir={tmp_path / 'plain'}"])
    train(build_run(plain))
    threaded = load_config(tiny_vl_config(**base), [f"output_dir={tmp_path / 'thread'}"])
    _, loader = open_feed(_with_thread(build_run(threaded), in_backward), {"epoch": 0, "index": 0})
    assert isinstance(loader, Prefetched) and loader.in_backward == in_backward  # the runs below use the thread
    loader.close()
    assert train(_with_thread(build_run(threaded), in_backward), stop_after=2) is None
    train(_with_thread(build_run(threaded), in_backward))
    for kind, key in (("train", "loss"), ("eval", "eval_loss")):
        want = [r[key] for r in _rows(tmp_path / "plain", kind)]
        assert want and [r[key] for r in _rows(tmp_path / "thread", kind)] == want
