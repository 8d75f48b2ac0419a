"""Two CPU ranks (torchrun + accelerate, gloo): the same loop, sharded data, one logged global loss."""

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torchrun import failure, launch, torchrun_cmd  # noqa: E402


@pytest.mark.slow  # ~18 s on 2 cores: two ranks start, load and train
@pytest.mark.distributed
def test_two_rank_ddp_run_trains_and_logs_the_global_loss(tiny_vl_config, tmp_path):
    cfg = tiny_vl_config(train={"max_steps": 2, "grad_accum": 2}, adapter={"train_components": ["projector"]})
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = launch(lambda port: torchrun_cmd(port, "-m", "mmtune.cli", "train", str(cfg), "--skip-checks"),
                 timeout=600, env=env)
    assert out.returncode == 0, failure(out)
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r["kind"] == "train"]
    assert [r["step"] for r in train_rows] == [1, 2]  # logged once (main rank), not once per rank
    # 2 ranks x 2 micro-batches x 2 records: the answer tokens of 8 records, summed over ranks
    assert all(r["answer_tokens"] >= 8 for r in train_rows)
    summary = json.loads((run / "summary.json").read_text())
    assert any("find_unused_parameters" in d for d in summary["decisions"])
    assert (run / "checkpoint-2" / "adapter" / "adapter_config.json").is_file()
