"""train.dist_timeout_minutes on 2 CPU gloo ranks: the process group really gets the resolved run's timeout,
under ddp (accelerate's InitProcessGroupKwargs) and under DeepSpeed ZeRO (the CPU group started for it)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torchrun import failure, launch, torchrun_cmd  # noqa: E402

RANK_SCRIPT = str(Path(__file__).resolve().parent / "group_timeout_rank.py")


@pytest.mark.slow  # ~10 s a launch on 2 cores: two ranks resolve and start the group, no model is built
@pytest.mark.distributed
@pytest.mark.parametrize("strategy", ["ddp", pytest.param("zero2", marks=pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed here"))])
def test_two_ranks_get_the_resolved_timeout(tiny_vl_config, strategy):
    # 47 min: neither torch's gloo default (30) nor NCCL's / DeepSpeed's (10), so only the setting explains it
    cfg = tiny_vl_config(train={"strategy": strategy, "dist_timeout_minutes": 47})
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = launch(lambda port: torchrun_cmd(port, RANK_SCRIPT, str(cfg)), timeout=300, env=env)
    assert out.returncode == 0, failure(out)
    # the two ranks write to one pipe: each report is one write, but they may share a line
    ranks = [json.loads(m) for m in re.findall(r"GROUP_TIMEOUT (\{[^{}]*\})", out.stdout)]
    assert sorted(r["rank"] for r in ranks) == [0, 1], failure(out)
    for r in ranks:
        assert (r["processes"], r["strategy"], r["decided_minutes"]) == (2, strategy, 47.0)
        assert r["handler_s"] == r["group_s"] == 47 * 60
