"""A plan for a catalog GPU describes the run on that machine, set up with `mmtune[gpu]`, not the laptop's
packages (--assume-installed, a decision of the resolved run: resolve/target.py)."""

from __future__ import annotations

import pytest

from mmtune.config import load_config
from mmtune.errors import ConfigError
from mmtune.resolve import gpu_target, local_target, resolve_run

BASE = ["model.name=tiny/qwen2", "train.precision=bf16"]


def test_a_catalog_gpu_gets_the_gpu_extra_whatever_this_machine_has():
    r = resolve_run(load_config(None, BASE), gpu_target("a100-80gb"))
    assert r.attn_implementation == "flash_attention_2"
    assert "assumed on the target (--assume-installed gpu-extra)" in r.decision("model.attn_implementation").reason
    assert r.cfg.train.fused_kernels == "liger"
    assert r.decision("packages").value.startswith("mmtune[gpu] assumed on the A100 80GB: flash-attn, liger-kernel")
    # the hardware still decides: no FlashAttention-2 on a T4 (sm_75), packages or not
    assert resolve_run(load_config(None, BASE), gpu_target("t4")).attn_implementation == "sdpa"


def test_none_plans_core_packages_only_and_refuses_what_needs_bitsandbytes():
    r = resolve_run(load_config(None, BASE), gpu_target("a100-80gb", assume_installed="none"))
    assert (r.attn_implementation, r.cfg.train.fused_kernels) == ("sdpa", "none")
    assert "assumed absent" in r.decision("model.attn_implementation").reason
    for ov in ("adapter.method=qlora", "train.optimizer=adamw_8bit"):
        with pytest.raises(ConfigError, match="needs bitsandbytes"):
            resolve_run(load_config(None, BASE + [ov]), gpu_target("a100-80gb", assume_installed="none"))
    with pytest.raises(ConfigError, match="--assume-installed 'some'"):
        gpu_target("a100-80gb", assume_installed="some")


def test_a_run_here_decides_with_this_machines_packages():
    import importlib.util

    r = resolve_run(load_config(None, BASE), local_target("cpu"))
    assert r.decision("packages") is None and r.attn_implementation == "sdpa"
    here = resolve_run(load_config(None, BASE), gpu_target("a100-80gb", assume_installed="here"))
    fa2 = importlib.util.find_spec("flash_attn") is not None
    assert here.attn_implementation == ("flash_attention_2" if fa2 else "sdpa")
