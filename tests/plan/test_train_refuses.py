"""`mmtune train` plans first and refuses a run predicted not to fit (train.ignore_plan overrides)."""

import json


def test_oversized_run_is_refused_before_training(tmp_path):
    from typer.testing import CliRunner

    from mmtune.cli import app

    text = " ".join(str(i % 10) for i in range(3000))
    data = tmp_path / "long.jsonl"
    data.write_text(json.dumps({"id": "r0", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "count"}]},
        {"role": "assistant", "content": [{"type": "text", "text": text}]}]}) + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"output_dir: {tmp_path / 'run'}\nmodel:\n  name: tiny/qwen2\n  gradient_checkpointing: false\n"
                   f"data:\n  train: {data}\n  max_length: 8192\nadapter:\n  method: full\n"
                   "train:\n  micro_batch_size: 512\n  max_steps: 1\n  precision: fp32\n  gpu: t4\n")
    out = CliRunner().invoke(app, ["train", str(cfg), "--skip-checks"])
    assert out.exit_code != 0
    assert "does NOT fit" in out.output or "more than" in out.output, out.output
    assert not (tmp_path / "run" / "summary.json").exists()
