"""train.offload=optimizer: one resolved decision (refused where nothing is sharded), the DeepSpeed config it
generates, the plan's GPU / host / PCIe model, the catalog's host-link facts and the doctor's checks.
The real 2-rank runs are tests/train/test_offload_runs.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from mmtune.config import load_config
from mmtune.errors import ConfigError
from mmtune.launch_config import deepspeed_config
from mmtune.resolve import gpu_target, local_target, resolve_run


def _cfg(tmp_path, *overrides):
    p = tmp_path / "c.yaml"
    p.write_text("model:\n  name: tiny/qwen2\ndata:\n  max_length: 128\n")
    return load_config(p, [f"output_dir={tmp_path / 'run'}", *overrides])


def test_offload_is_refused_on_one_process_and_under_ddp_with_the_strategies_that_do_it(tmp_path):
    for overrides, target in ((["train.strategy=fsdp"], gpu_target("t4")),
                              (["train.strategy=ddp"], gpu_target("t4", gpus=2)),
                              ([], gpu_target("rtx-3090", gpus=2))):  # auto on 2 GPUs picks ddp for a tiny model
        with pytest.raises(ConfigError) as e:
            resolve_run(_cfg(tmp_path, "train.offload=optimizer", *overrides), target)
        assert e.value.where == "train.offload"
        assert "train.strategy=zero2" in e.value.fix and "train.strategy=fsdp" in e.value.fix
        assert "paged_adamw_8bit" in e.value.fix  # the single-GPU way
    r = resolve_run(_cfg(tmp_path), gpu_target("t4"))
    assert r.offload == "none" and r.decision("train.offload") is None  # the default adds no line


def test_the_decision_says_what_each_strategy_offloads(tmp_path):
    r = resolve_run(_cfg(tmp_path, "train.offload=optimizer", "train.strategy=fsdp"), gpu_target("rtx-3090", gpus=2))
    d = r.decision("train.offload")
    assert r.offload == "fsdp" and "CPUOffloadPolicy" in d.value
    assert "parameters, gradients and the optimizer's state" in d.reason  # FSDP2 offloads more than the optimizer
    assert r.to_dict()["offload"] == "fsdp" and any(line.startswith("train.offload:") for line in r.to_dict()["decisions"])
    # A plan for a catalog GPU assumes mmtune[gpu] there: DeepSpeed with its CPU Adam.
    z = resolve_run(_cfg(tmp_path, "train.offload=optimizer", "train.strategy=zero2"), gpu_target("rtx-3090", gpus=2))
    assert z.offload == "zero-cpuadam" and "DeepSpeedCPUAdam" in z.decision("train.offload").value
    # An optimizer that is not Adam is stepped by torch on the CPU: said, and the doctor's MM076 warns.
    s = resolve_run(_cfg(tmp_path, "train.offload=optimizer", "train.strategy=zero3", "train.optimizer=sgd"),
                    gpu_target("rtx-3090", gpus=2))
    assert s.offload == "zero-torch" and "torch sgd on the CPU" in s.decision("train.offload").value
    with pytest.raises(ConfigError, match="bitsandbytes' optimizers step CUDA tensors"):
        resolve_run(_cfg(tmp_path, "train.offload=optimizer", "train.strategy=zero2", "train.optimizer=adamw_8bit"),
                    gpu_target("rtx-3090", gpus=2))


def test_the_generated_deepspeed_config_offloads_the_optimizer(tmp_path):
    target = gpu_target("a100-80gb", gpus=4)
    on = deepspeed_config(resolve_run(_cfg(tmp_path, "train.offload=optimizer", "train.strategy=zero2"), target))
    assert on["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert "zero_force_ds_cpu_optimizer" not in on  # DeepSpeedCPUAdam is what DeepSpeed asks for
    sgd = deepspeed_config(resolve_run(_cfg(tmp_path, "train.offload=optimizer", "train.strategy=zero3",
                                            "train.optimizer=sgd"), target))
    assert sgd["zero_optimization"]["offload_optimizer"]["device"] == "cpu" and sgd["zero_force_ds_cpu_optimizer"] is False
    off = deepspeed_config(resolve_run(_cfg(tmp_path, "train.strategy=zero2"), target))
    assert "offload_optimizer" not in off["zero_optimization"]


def test_every_catalog_gpu_has_its_host_link():
    from mmtune.gpus import GPUS, HOST_LINK_GBS, host_link_gbs

    assert set(HOST_LINK_GBS) == set(GPUS)
    assert host_link_gbs(GPUS["t4"]) == 15.75 and host_link_gbs(GPUS["a100-80gb"]) == 31.5 and host_link_gbs(GPUS["h100"]) == 63.0


@pytest.mark.parametrize("strategy", ["fsdp", "zero2"])
def test_the_plan_moves_the_state_to_the_host_and_charges_pcie_and_the_cpu_step(tmp_path, strategy):
    """Against the same run without offload on the same 2 GPUs: the GPU holds less by what moved, the host holds
    the state (1/N per rank, every rank of the node), the PCIe bytes follow the strategy's copies, and the step
    time trades the GPU's optimizer step for the CPU's plus the copies."""
    from mmtune.plan.offload import ADAM_BYTES_PER_ELEM, HOST_ADAM_GBS, TORCH_CPU_ADAM_SLOWDOWN
    from mmtune.plan.planner import predict

    common = ["adapter.method=full", f"train.strategy={strategy}", "train.precision=bf16", "train.grad_accum=2"]
    base = predict(_cfg(tmp_path, *common), gpu="t4", gpus=2, plan_eval=False)
    off = predict(_cfg(tmp_path, *common, "train.offload=optimizer"), gpu="t4", gpus=2, plan_eval=False)
    o = off.offload
    n, numel = 2, off.trainable_params
    assert not base.offload and o["mode"] == ("fsdp" if strategy == "fsdp" else "zero-cpuadam")
    assert off.peak_allocated_bytes < base.peak_allocated_bytes
    assert off.breakdown["optimizer_state"] == 0 and base.breakdown["optimizer_state"] > 0
    # AdamW's two fp32 moments of this rank's share (and its per-tensor step counters)
    assert o["parts"]["optimizer_state"] == pytest.approx(8 * numel // n, rel=1e-3)
    assert o["host_bytes_per_node"] == 2 * o["host_bytes_per_rank"] == 2 * sum(o["parts"].values())
    if strategy == "zero2":  # fp32 master + gradient partition + the 16-bit copy the update goes back through
        assert (o["parts"]["fp32_master"], o["parts"]["gradient_partition"], o["parts"]["bit16_copy"]) == (
            4 * numel // n, 4 * numel // n, 2 * numel // n)
    if strategy == "fsdp":
        param_bytes = o["parts"]["parameter_shards"] * n
        assert o["h2d_bytes"] == 2 * 2 * (param_bytes // n)  # forward + backward, 2 micro-batches
        assert o["d2h_bytes"] == 4 * numel // n
    else:  # bf16 gradient partition each micro-batch, bf16 weights back once
        assert (o["d2h_bytes"], o["h2d_bytes"]) == (2 * 2 * numel // n, 2 * numel // n)
    assert o["host_link_gbs"] == 15.75 and o["pcie_s"] == pytest.approx((o["h2d_bytes"] + o["d2h_bytes"]) / 15.75e9)
    # DeepSpeed's C++ Adam at the assumed host rate; FSDP2 steps torch's AdamW on the CPU, measured 8x slower
    rate = HOST_ADAM_GBS if strategy == "zero2" else HOST_ADAM_GBS / TORCH_CPU_ADAM_SLOWDOWN
    assert o["host_adam_gbs"] == rate
    assert o["cpu_optimizer_s"] == pytest.approx(ADAM_BYTES_PER_ELEM * (numel // n) / (rate * 1e9))
    assert off.step_time_parts["optimizer_s"] == o["cpu_optimizer_s"]
    expected = base.step_time_s - base.step_time_parts["optimizer_s"] + o["cpu_optimizer_s"] + o["pcie_s"]
    assert off.step_time_s == pytest.approx(expected, rel=1e-6)
    assert any(d.startswith("offload: ") for d in off.decisions)


def test_plan_cli_prints_the_offload_line(tmp_path):
    from typer.testing import CliRunner

    from mmtune.cli import app

    p = tmp_path / "c.yaml"
    p.write_text("model:\n  name: tiny/qwen2\ndata:\n  max_length: 128\n")
    out = CliRunner().invoke(app, ["plan", str(p), "--gpu", "t4", "--gpus", "2", "train.strategy=zero2",
                                   "train.offload=optimizer", f"output_dir={tmp_path / 'r'}"], env={"COLUMNS": "300"})
    assert out.exit_code == 0, out.output
    assert "optimizer offload (zero-cpuadam)" in out.output and "pinned host memory" in out.output


def test_doctor_refuses_offload_without_a_strategy(tmp_path):
    import yaml

    from mmtune.doctor.runner import run_doctor

    def doctor(tree, code):
        path = tmp_path / "d.yaml"
        path.write_text(yaml.safe_dump({**tree, "output_dir": str(tmp_path / "d")}))
        return run_doctor(path, [], None, only=[code])

    tree = {"model": {"name": "tiny/qwen2"}, "data": {"train": "synthetic:arithmetic", "max_length": 128}}
    rep = doctor({**tree, "train": {"offload": "optimizer"}}, "MM077")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM077", "error")]
    assert "train.strategy=zero2" in rep.findings[0].fix
    assert doctor(tree, "MM077").findings == []


def test_mm121_and_mm120_read_the_resolved_run(tmp_path, monkeypatch):
    """MM076 warns when ZeRO-Offload falls back to torch's optimizer; MM075 compares the plan's pinned host bytes
    per node with this machine's RAM (a run that executes here) and says them for another machine."""
    from mmtune.doctor.checks import offload as checks

    class Ctx:
        def __init__(self, **pieces):
            self.pieces = pieces

        def need(self, k):
            return self.pieces[k]

    cfg = _cfg(tmp_path, "train.offload=optimizer", "train.strategy=zero2", "train.optimizer=sgd")
    r = resolve_run(cfg, gpu_target("a10", gpus=2))
    found = list(checks.cpu_adam(Ctx(cfg=cfg, resolved=r)))
    assert [f.severity for f in found] == ["warning"] and "DS_BUILD_CPU_ADAM=1" in found[0].fix

    class Plan:
        offload = {"host_bytes_per_node": 3 << 30, "host_bytes_per_rank": 1.5 * 2**30}

    remote = list(checks.host_ram(Ctx(cfg=cfg, resolved=r, plan=Plan)))
    assert [f.severity for f in remote] == ["info"] and "3.0 GiB" in remote[0].message
    here = replace(r, target=replace(local_target("cpu"), processes=2))
    monkeypatch.setattr(checks, "host_ram_bytes", lambda: (16 << 30, 2 << 30))
    short = list(checks.host_ram(Ctx(cfg=cfg, resolved=here, plan=Plan)))
    assert [f.severity for f in short] == ["error"] and "signal 9" in short[0].message
    monkeypatch.setattr(checks, "host_ram_bytes", lambda: (64 << 30, 60 << 30))
    assert list(checks.host_ram(Ctx(cfg=cfg, resolved=here, plan=Plan))) == []


def test_docs_name_the_offload_section():
    text = (Path(__file__).resolve().parents[1] / "docs" / "distributed.md").read_text()
    assert "## Optimizer offload" in text and "train.offload=optimizer" in text


def test_the_fix_search_offers_offload_under_a_sharding_strategy_before_any_precision_move(tmp_path):
    from mmtune.plan.fixes import _moves

    names = [m[0] for m in _moves(_cfg(tmp_path, "train.strategy=zero2"))]
    assert "optimizer offload" in names and names.index("optimizer offload") < names.index("8-bit AdamW")
    assert "optimizer offload" not in [m[0] for m in _moves(_cfg(tmp_path, "train.strategy=ddp"))]
    assert "optimizer offload" not in [m[0] for m in _moves(_cfg(tmp_path, "train.strategy=fsdp",
                                                                   "train.offload=optimizer"))]
