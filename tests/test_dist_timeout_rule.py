"""train.dist_timeout_minutes: decided once in the resolved run, from the size of what rank 0 writes and reads
back alone at a save while the other ranks wait (resolve/dist_timeout.py); the user's value kept; nothing on one
process. That two ranks really get it: tests/train/test_dist_timeout.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmtune.config import load_config
from mmtune.errors import ConfigError
from mmtune.resolve import gpu_target, resolve_run
from mmtune.resolve.dist_timeout import FLOOR_MINUTES, SLOW_DISK, auto_minutes

QWEN7B = "Qwen/Qwen2-VL-7B-Instruct"  # an embedded public config: sized without a download


def _cfg(tmp_path: Path, *overrides: str):
    p = tmp_path / "c.yaml"
    p.write_text(f"model:\n  name: {QWEN7B}\ndata:\n  max_length: 128\ntrain:\n  precision: bf16\n")
    return load_config(p, list(overrides))


def _timeout(cfg, gpus: int = 8):
    r = resolve_run(cfg, gpu_target("a100-80gb", gpus=gpus))
    return r.dist_timeout_minutes, r.decision("train.dist_timeout_minutes")


def test_a_full_fine_tune_waits_longer_than_lora_and_says_what_rank_0_writes(tmp_path):
    # 8.3 B parameters, 8 GPUs. Full: the whole model in fp32 master weights, its exact copy and Adam's state
    # (~120 GiB) written and read back by rank 0 at 50 MiB/s takes over an hour; LoRA's save takes minutes.
    full, d_full = _timeout(_cfg(tmp_path, "adapter.method=full"))
    lora, d_lora = _timeout(_cfg(tmp_path))
    assert lora == FLOOR_MINUTES and full > 60
    assert d_full.value == f"{full:g} min" and d_full.changed
    assert "auto:" in d_full.reason and "the whole model" in d_full.reason and "rank 0 alone" in d_full.reason
    assert "NCCL's default watchdog" in d_full.reason and "7 rank(s) wait" in d_full.reason
    assert "the adapter" in d_lora.reason
    gib = float(d_full.reason.split("a save is ~")[1].split(" GiB")[0])
    assert full == auto_minutes(int(gib * 2**30))  # the minutes follow from the size the reason names


def test_auto_minutes_is_a_write_and_a_read_at_a_slow_disk_rounded_up_to_ten():
    assert auto_minutes(0) == FLOOR_MINUTES
    assert auto_minutes(SLOW_DISK * 60 * 40 // 2) == 40  # 2 x size at 50 MiB/s = 40 min exactly
    assert auto_minutes(SLOW_DISK * 60 * 40 // 2 + 1) == 50


def test_the_users_value_is_kept_and_a_short_one_is_named(tmp_path):
    minutes, d = _timeout(_cfg(tmp_path, "adapter.method=full", "train.dist_timeout_minutes=20"))
    assert minutes == 20 and d.value == "20 min" and d.reason.startswith("requested; shorter than the")
    minutes, d = _timeout(_cfg(tmp_path, "train.dist_timeout_minutes=240"))
    assert minutes == 240 and d.line() == "train.dist_timeout_minutes: 240 min (requested)"


def test_one_process_has_no_process_group(tmp_path):
    assert _timeout(_cfg(tmp_path), gpus=1) == (None, None)
    minutes, d = _timeout(_cfg(tmp_path, "train.dist_timeout_minutes=45"), gpus=1)
    assert minutes is None and d.value == "not used"


@pytest.mark.parametrize("bad", ["0", "-5", "soon"])
def test_a_timeout_must_be_positive_minutes(tmp_path, bad):
    with pytest.raises(ConfigError):
        _cfg(tmp_path, f"train.dist_timeout_minutes={bad}")
