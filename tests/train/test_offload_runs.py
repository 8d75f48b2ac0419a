"""train.offload=optimizer for real on 2 CPU gloo ranks: FSDP2 with CPUOffloadPolicy and DeepSpeed ZeRO-Offload
give the losses of the same run without offload, and each says (from the objects that ran, not from the
config) that it offloaded: FSDP2's wrap note is written by sharding.apply_fsdp only when the policy is passed,
and the DeepSpeed line reads the engine's own `zero_cpu_offload()` and the optimizer it wraps.

On CPU ranks "host memory" is the only memory, so what these runs prove is that the offload code paths build
and train the same model; the GPU bytes saved and the PCIe time are the plan's (tests/test_offload.py) until a
GPU runs them (docs/distributed.md#optimizer-offload)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence_runs import STEPS  # noqa: E402
from test_fsdp import close, two_ranks  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.distributed]
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


def _summary(tmp_path, case, tag) -> dict:
    return json.loads((tmp_path / case / f"run-{tag}" / "summary.json").read_text())


def _cpu_adam_ready() -> bool:
    """DeepSpeed's cpu_adam op prebuilt, or already compiled in torch's extension cache (a first JIT build takes
    ~9 minutes on 2 cores: not something a test run should start by itself)."""
    if not HAS_DEEPSPEED:
        return False
    from mmtune.compat.deepspeed_ops import cpu_adam_prebuilt

    if cpu_adam_prebuilt():
        return True
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR", Path.home() / ".cache" / "torch_extensions"))
    return any(root.glob("*/cpu_adam/cpu_adam*.so")) or any(root.glob("cpu_adam/cpu_adam*.so"))


def test_fsdp_cpu_offload_and_zero_offload_with_torch_sgd_train_as_without(tmp_path):
    """~2 min: one 2-rank launch of FSDP2 text LoRA and image full fine-tune with and without CPUOffloadPolicy, and
    (DeepSpeed installed) ZeRO-2 / ZeRO-3 offload stepped by torch's SGD on the CPU (the fallback path when
    DeepSpeed's CPU Adam cannot be had)."""
    jobs = []
    for case in ("text-lora", "image-full"):
        jobs += [{"key": f"{case}:fsdp", "case": case, "strategy": "fsdp", "tag": "fsdp"},
                 {"key": f"{case}:fsdp-off", "case": case, "strategy": "fsdp", "tag": "fsdp-off", "offload": "optimizer"}]
    if HAS_DEEPSPEED:
        for s in ("zero2", "zero3"):
            jobs += [{"key": f"image-lora:{s}", "case": "image-lora", "strategy": s, "tag": s, "optimizer": "sgd",
                      "lr": 1e-3},
                     {"key": f"image-lora:{s}-off", "case": "image-lora", "strategy": s, "tag": f"{s}-off",
                      "optimizer": "sgd", "lr": 1e-3, "offload": "optimizer"}]
    two = two_ranks(jobs, tmp_path)
    for case in ("text-lora", "image-full"):
        base, off = two[f"{case}:fsdp"], two[f"{case}:fsdp-off"]
        assert len(off) == STEPS and close(off, base), (case, off, base)
        decisions = _summary(tmp_path, case, "fsdp-off")["decisions"]
        wrapped = [d for d in decisions if d.startswith("FSDP2:")]
        assert wrapped and "CPUOffloadPolicy" in wrapped[0], decisions
        assert any(d.startswith("train.offload: optimizer (FSDP2 CPUOffloadPolicy)") for d in decisions)
        assert not any("CPUOffloadPolicy" in d for d in _summary(tmp_path, case, "fsdp")["decisions"])
    if not HAS_DEEPSPEED:
        return
    for s in ("zero2", "zero3"):
        base, off = two[f"image-lora:{s}"], two[f"image-lora:{s}-off"]
        assert len(off) == STEPS and close(off, base), (s, off, base)
        decisions = _summary(tmp_path, "image-lora", f"{s}-off")["decisions"]
        engine = [d for d in decisions if d.startswith("DeepSpeed ZeRO-")]
        assert engine and engine[0].endswith("around SGD (sgd); optimizer offloaded to the CPU"), decisions
        ds = json.loads((tmp_path / "image-lora" / f"run-{s}-off" / "deepspeed.json").read_text())
        assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu" and ds["zero_force_ds_cpu_optimizer"] is False
        plain = [d for d in _summary(tmp_path, "image-lora", s)["decisions"] if d.startswith("DeepSpeed ZeRO-")]
        assert "offloaded" not in plain[0]


@pytest.mark.skipif(not _cpu_adam_ready(), reason="DeepSpeed's cpu_adam op is neither prebuilt nor compiled here: "
                    "DS_BUILD_CPU_ADAM=1 pip install deepspeed, or build it once (python -c 'from deepspeed.ops.op_builder "
                    "import CPUAdamBuilder; CPUAdamBuilder().load()', ~9 min on 2 cores)")
def test_zero2_offload_with_deepspeed_cpu_adam_matches_torch_adamw(tmp_path):
    """~1 min: ZeRO-2 with DeepSpeedCPUAdam stepping the CPU partitions gives torch AdamW's losses (same update
    rule, C++ SIMD instead of torch ops)."""
    jobs = [{"key": "base", "case": "text-lora", "strategy": "zero2", "tag": "z2"},
            {"key": "off", "case": "text-lora", "strategy": "zero2", "tag": "z2-off", "offload": "optimizer"}]
    two = two_ranks(jobs, tmp_path)
    assert close(two["off"], two["base"], tol=1e-5), two
    engine = [d for d in _summary(tmp_path, "text-lora", "z2-off")["decisions"] if d.startswith("DeepSpeed ZeRO-")]
    assert engine and "around DeepSpeedCPUAdam (adamw); optimizer offloaded to the CPU" in engine[0]
