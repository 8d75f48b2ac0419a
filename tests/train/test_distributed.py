"""Two CPU ranks (torchrun + accelerate, gloo): the same loop, sharded data, one logged global loss."""

import json
import os
import subprocess
import sys

import pytest


def _free_port() -> int:
    """A port nobody listens on now (test sessions running side by side collided on a fixed one)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # ~18 s on 2 cores: two ranks start, load and train
@pytest.mark.distributed
def test_two_rank_ddp_run_trains_and_logs_the_global_loss(tiny_vl_config, tmp_path):
    cfg = tiny_vl_config(train={"max_steps": 2, "grad_accum": 2}, adapter={"train_components": ["projector"]})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()),
           "-m", "mmtune.cli", "train", str(cfg), "--skip-checks"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r["kind"] == "train"]
    assert [r["step"] for r in train_rows] == [1, 2]  # logged once (main rank), not once per rank
    # 2 ranks x 2 micro-batches x 2 records: the answer tokens of 8 records, summed over ranks
    assert all(r["answer_tokens"] >= 8 for r in train_rows)
    summary = json.loads((run / "summary.json").read_text())
    assert any("find_unused_parameters" in d for d in summary["decisions"])
    assert (run / "checkpoint-2" / "adapter" / "adapter_config.json").is_file()
