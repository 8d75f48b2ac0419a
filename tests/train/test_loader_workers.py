"""train.num_workers: the loader's settings are decided in the resolved run (with their reason) and
applied as decided; a run whose micro-batches come from fork-server workers resumes exactly like one
without workers; summary.json reports the data wait of the first step apart from the steady state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.data.workers import LoaderPlan, has_forkserver, preload_modules
from mmtune.resolve import resolve_run
from mmtune.resolve.target import gpu_target, local_target
from mmtune.train.loop import train


def _losses(out: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]


def test_loader_settings_are_decided_once_with_a_reason(tiny_vl_config):
    cfg = load_config(tiny_vl_config(train={"num_workers": 2}), [])
    cpu = resolve_run(cfg, local_target("cpu"))
    d = cpu.decision("train.num_workers")
    method = "forkserver" if has_forkserver() else "spawn"
    assert cpu.loader == LoaderPlan(num_workers=2, start_method=method, persistent=True, prefetch_factor=2,
                                    pin_memory=False, thread_prefetch=cfg.train.grad_accum)  # received by a thread
    assert method in d.value and "pinned memory off" in d.value and "never forked" in d.reason
    gpu = resolve_run(cfg, gpu_target("a100-80gb"))  # a run planned for a GPU pins its host batches
    assert gpu.loader.pin_memory and "pinned memory on" in gpu.decision("train.num_workers").value
    none = resolve_run(load_config(tiny_vl_config(), []), local_target("cpu"))
    assert none.decision("train.num_workers") is None and none.loader.loader_kwargs() == {"num_workers": 0}
    streamed = resolve_run(load_config(tiny_vl_config(train={"num_workers": 2}, data={"streaming": True}), []),
                           local_target("cpu"))
    assert streamed.decision("train.num_workers") is None and streamed.loader.num_workers == 0


def test_preload_names_the_processor_modules(tiny_vl_config):
    run = resolve_run(load_config(tiny_vl_config(), []), local_target("cpu"))
    mods = preload_modules(run.processor)
    assert type(run.processor).__module__ in mods and type(run.processor.image_processor).__module__ in mods
    assert "torch" in mods and "mmtune.train.loop" in mods


@pytest.mark.skipif(not has_forkserver(), reason="the fork server exists on POSIX only")
def test_worker_run_resumes_exactly_and_reports_its_data_wait(tiny_vl_config, tmp_path):
    """4 steps in the main process == 2 steps with a fork-server worker (its micro-batches received by a
    thread), stop (as a kill would), 2 more resumed with a worker: same losses within 1e-6. summary.json:
    first-step wait and steady fraction."""
    base = dict(train={"max_steps": 4, "save_every": 2}, adapter={"dropout": 0.1}, data={"eval": None})
    straight = load_config(tiny_vl_config(**base), [f"output_dir={tmp_path / 'straight'}"])
    train(build_run(straight))
    workers = load_config(tiny_vl_config(**base), [f"output_dir={tmp_path / 'workers'}", "train.num_workers=1"])
    assert train(build_run(workers), stop_after=2) is None
    summary = train(build_run(workers))
    assert _losses(tmp_path / "workers") == pytest.approx(_losses(tmp_path / "straight"), abs=1e-6)
    assert any(d.startswith("train.num_workers: 1 worker(s), forkserver") for d in summary["decisions"])
    # ... read by a thread of the training process (train/prefetch.py), not on the loop's path
    assert any(d.startswith("train.prefetch: a background thread receives") for d in summary["decisions"])
    on_disk = json.loads((tmp_path / "workers" / "summary.json").read_text())
    for s in (summary, on_disk):
        assert 0 < s["data_wait_first_step_s"] < s["wall_s"]
        assert 0 <= s["data_wait_fraction_after_first_step"] < 1 and 0 < s["data_wait_fraction"] < 1


def test_a_cpu_workers_micro_batch_crosses_by_value_exactly():
    """ByValue + received (data/workers.py): every tensor comes back equal in dtype, shape and value through a
    pickle (what the result pipe does), bf16 / fp16 included (numpy has no bf16); non-tensor entries pass as they
    are; a batch past the limit stays torch's (its tensors go through shared memory)."""
    import pickle

    import torch

    from mmtune.data.workers import ByValue, Carried, received

    g = torch.Generator().manual_seed(0)
    batch = {"input_ids": torch.randint(0, 99, (4, 9), generator=g), "token_mask": torch.ones(4, 9, dtype=torch.long),
             "pixel_values": torch.randn(16, 12, generator=g).to(torch.bfloat16),
             "half": torch.randn(3, generator=g).half(), "flags": torch.tensor([True, False]),
             "scalar": torch.tensor(3.5), "strided": torch.randn(6, 4, generator=g).t(), "_bad_record": [(3, "f:3")]}
    sent = ByValue(lambda items: dict(batch))([None])
    assert all(isinstance(sent[k], Carried) for k in batch if k != "_bad_record")
    back = received(pickle.loads(pickle.dumps(sent)))
    assert back["_bad_record"] == [(3, "f:3")]
    for k, v in batch.items():
        if isinstance(v, torch.Tensor):
            assert back[k].dtype == v.dtype and torch.equal(back[k], v), k
    big = ByValue(lambda items: dict(batch), limit=64)([None])
    assert all(isinstance(v, torch.Tensor) for k, v in big.items() if k != "_bad_record")
    assert received(big)["pixel_values"] is batch["pixel_values"]
