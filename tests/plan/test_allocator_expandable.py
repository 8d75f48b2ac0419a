"""The CUDA allocator the run uses: decided once (PYTORCH_CUDA_ALLOC_CONF), modelled by the plan, applied by build."""
import pytest

from mmtune.config import load_config
from mmtune.plan.allocator import CachingAllocatorModel, ExpandableAllocatorModel, replay
from mmtune.resolve.decisions import EXPANDABLE, decide_cuda_allocator

MiB = 1 << 20


def test_varying_sizes_fragment_fixed_segments_but_not_expandable_ones():
    """Two 30 MiB tensors of one step, freed, then a 50 MiB tensor of a longer batch: the default allocator's
    two cached 30 MiB segments cannot hold it (blocks never span segments) and it adds a third; the
    expandable segment holds all three in 60 MiB of mapped pages."""
    for cls, reserved in ((CachingAllocatorModel, 110 * MiB), (ExpandableAllocatorModel, 60 * MiB)):
        m = cls()
        m.malloc(0, 30 * MiB)
        m.malloc(1, 30 * MiB)
        m.free(0)
        m.free(1)
        m.malloc(2, 50 * MiB)
        assert m.reserved == m.peak_reserved == reserved, cls.__name__
        assert m.allocated == 50 * MiB


def test_expandable_pages_pools_and_splits():
    m = ExpandableAllocatorModel()
    m.malloc(0, 100)  # small pool: one 2 MiB page
    m.malloc(1, 5 * MiB)  # large pool: one 20 MiB page
    assert m.reserved == 22 * MiB
    m.malloc(2, 14 * MiB + 512 * 1024)  # the large page's free 15 MiB tail holds it: nothing mapped
    assert m.reserved == 22 * MiB
    m.malloc(3, MiB + 512)  # 0.5 MiB left at the end: one more page, merged with it
    assert m.reserved == 42 * MiB
    # every remainder of >= 512 B is split off under expandable segments (fixed segments: only > 1 MiB)
    fixed, exp = CachingAllocatorModel(), ExpandableAllocatorModel()
    for m in (fixed, exp):
        m.malloc(0, 19 * MiB + 512 * 1024)
    assert fixed.allocated == 20 * MiB and exp.allocated == 19 * MiB + 512 * 1024


def test_free_pages_at_a_segment_end_are_unmapped_before_exceeding_the_gpu():
    m = ExpandableAllocatorModel(capacity=20 * MiB)
    m.malloc(0, 1024)  # small pool: 2 MiB
    m.free(0)
    m.malloc(1, 20 * MiB)  # 2 + 20 > 20: the small pool's free page is unmapped first
    assert m.reserved == m.peak_reserved == 20 * MiB
    m.free(1)
    m.malloc(2, 10 * MiB)
    assert m.reserved == 20 * MiB  # reused, nothing mapped


def test_replay_selects_the_model():
    from types import SimpleNamespace as E

    events = [E(serial=0, nbytes=30 * MiB), E(serial=1, nbytes=30 * MiB), E(serial=0, nbytes=0),
              E(serial=1, nbytes=0), E(serial=2, nbytes=50 * MiB)]
    assert replay(events).peak_reserved == 110 * MiB
    assert replay(events, expandable=True).peak_reserved == 60 * MiB


@pytest.mark.parametrize("env,conf,expandable,kept", [
    ({}, EXPANDABLE, True, False),
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False,max_split_size_mb:128"},
     "expandable_segments:False,max_split_size_mb:128", False, True),
    ({"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.6"}, "garbage_collection_threshold:0.6", False, True),
    ({"PYTORCH_ALLOC_CONF": "Expandable_Segments:true"}, "Expandable_Segments:true", True, True),
])
def test_decision_keeps_the_users_setting(env, conf, expandable, kept):
    got, exp, d = decide_cuda_allocator(env)
    assert (got, exp) == (conf, expandable)
    assert d.key == "PYTORCH_CUDA_ALLOC_CONF" and ("kept" in d.reason) == kept


def test_the_plan_models_the_decided_allocator(monkeypatch):
    from mmtune.plan.batch import Declared
    from mmtune.plan.planner import predict, resolve_for_plan
    from mmtune.resolve import resolve_run, target_for

    cfg = load_config(None, ["model.name=tiny/qwen2", "data.max_length=4096", "train.micro_batch_size=4",
                             "train.precision=bf16"])
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    r = resolve_for_plan(cfg, "a100-80gb")
    assert r.expandable_segments and r.decision("PYTORCH_CUDA_ALLOC_CONF").value == EXPANDABLE
    assert r.to_dict()["cuda_alloc_conf"] == EXPANDABLE
    here = resolve_run(cfg, target_for(cfg, None, local=True))
    assert here.target.gpu is None and here.decision("PYTORCH_CUDA_ALLOC_CONF") is None  # the CPU has none
    exp = predict(r, declared=Declared(), plan_eval=False)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
    fixed = predict(cfg, gpu="a100-80gb", declared=Declared(), plan_eval=False)
    # one step's events through the two allocator models (measured here: 130 MiB expandable, 160 MiB fixed:
    # the step's many 8-32 MiB logits/activation tensors each take a segment of their own size when fixed)
    assert exp.peak_allocated_bytes <= fixed.peak_allocated_bytes
    assert exp.peak_reserved_bytes < fixed.peak_reserved_bytes
    assert any("expandable_segments:False" in line for line in fixed.decisions)


def test_runtime_setter_exists_in_installed_torch(monkeypatch):
    import torch

    from mmtune.compat import CompatError
    from mmtune.compat.cuda_allocator import allocator_setter, apply_cuda_allocator

    assert callable(allocator_setter())
    if not torch.cuda.is_available():
        assert apply_cuda_allocator(EXPANDABLE) is False  # nothing to set without CUDA
    for name in ("_accelerator_setAllocatorSettings", "_cuda_cudaCachingAllocator_set_allocator_settings"):
        monkeypatch.delattr(torch._C, name, raising=False)
    with pytest.raises(CompatError, match="CUDA allocator settings"):
        allocator_setter()


def test_near_full_warning_names_the_allocator_in_force():
    """MM001/MM003 close to the margin rule's line: with fixed segments (fragmentation over a run is not in a
    one-step plan) a warning whose fix is expandable segments; with them already on (mmtune's default) the
    margin rule's verdict stands: it fits, said as info, no advice to set what the run already has."""
    from types import SimpleNamespace

    from mmtune.doctor.checks.memory import fit_findings
    from mmtune.gpus import get_gpu
    from mmtune.plan.margin import MARGIN_PCT, fits, required_headroom

    gpu = get_gpu("t4")
    total = int(0.94 * gpu.total_bytes)
    assert fits(total, gpu.total_bytes)
    plan = SimpleNamespace(process_total_bytes=total, gpu_total_bytes=gpu.total_bytes, fits=True, gpu_name=gpu.name,
                           margin_bytes=gpu.total_bytes - total, required_margin_bytes=required_headroom(total),
                           required_margin_pct=MARGIN_PCT)
    (fixed,) = fit_findings(plan, gpu, "train step", expandable=False)
    (exp,) = fit_findings(plan, gpu, "train step", expandable=True)
    assert (fixed.severity, exp.severity) == ("warning", "info")
    assert "expandable_segments:True" in fixed.fix and not exp.fix
    assert "fits T4" in exp.message and "headroom asked" in exp.message


def test_a_run_of_varying_lengths_is_traced_step_by_step(tmp_path):
    """trace_config(step_batches=...): one step per batch, each its own length; the longest step's live peak
    is the one-step worst-case plan's (same model, same state), the shorter ones lower."""
    import subprocess
    import sys
    from pathlib import Path

    from mmtune.plan.batch import Declared, worst_case_batch
    from mmtune.plan.planner import resolve_for_plan, trace_config
    from mmtune.plan.run_growth import step_ends

    root = Path(__file__).resolve().parents[2]
    cfg = load_config(None, ["model.name=tiny/qwen2", "data.max_length=2048", "train.micro_batch_size=2",
                             "train.grad_accum=1", "train.precision=bf16"])
    r = resolve_for_plan(cfg, "a100-80gb")
    lengths = [256, 2048, 512]
    batches = [worst_case_batch(r, declared=Declared(tokens=n)).micro_batch for n in lengths]
    assert [b["input_ids"].shape[1] for b in batches] == lengths
    _, _, run, _ = trace_config(r, step_batches=batches)
    _, _, one, _ = trace_config(r, declared=Declared(tokens=2048))
    ev = run.tracker.trace.events
    assert len(step_ends(ev)) == 3
    peaks, live, j = [], 0, 0
    for end in step_ends(ev):
        best = 0
        for e in ev[j:end]:
            live += e.nbytes
            best = max(best, live)
        peaks.append(best)
        j = end
    assert peaks[1] == max(peaks) and peaks[0] < peaks[1] and peaks[2] < peaks[1]
    assert abs(peaks[1] - one.tracker.trace.peak_bytes) <= 0.01 * one.tracker.trace.peak_bytes
    p = subprocess.run([sys.executable, str(root / "benchmarks" / "allocator_varying_lengths.py"), "--model",
                        "tiny/qwen2", "--steps", "3", "--max-length", "1024", "--out", str(tmp_path / "avl")],
                       capture_output=True, text=True, timeout=600, cwd=root,
                       env={**__import__("os").environ, "PYTHONPATH": str(root / "src")})
    assert p.returncode == 0, p.stderr[-2000:]
    import json

    rows = json.loads((tmp_path / "avl.json").read_text())["rows"]
    assert set(rows) == {"fixed segments (torch default)", "expandable segments (mmtune default)"}
    assert all(r["run_gib"] > 0 and r["plan_worst_step_gib"] > 0 for r in rows.values())
