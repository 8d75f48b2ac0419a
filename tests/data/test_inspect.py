"""`mmtune data inspect`: counts by reason, token distribution by modality, the label mask shown."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from mmtune.cli import app

from .conftest import write_png


def _config(tmp_path, data: dict) -> str:
    import yaml

    p = tmp_path / "run.yaml"
    p.write_text(yaml.safe_dump({"model": {"name": "tiny/qwen2-vl"}, "data": data}))
    return str(p)


def test_inspect_synthetic_json(tmp_path):
    cfg = _config(tmp_path, {"train": "synthetic:counting", "synthetic_train_size": 12})
    res = CliRunner().invoke(app, ["data", "inspect", cfg, "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["ok"] == 12 and rep["bad"] == {}
    assert rep["tokens"]["image"]["max"] == 16 and rep["tokens"]["total"]["max"] == 37
    ex = rep["examples"][0]
    answer = ex["rendered"].split("<|im_start|>assistant\n")[1]
    assert "<|image_pad|>x16" in ex["rendered"] and answer.startswith("[[") and answer.rstrip().endswith("<|im_end|>]]")
    assert ex["rendered"].count("[[") == 1  # only the answer is trained on
    assert len(rep["examples"]) == 3


def test_inspect_counts_bad_records_by_reason_under_skip(tmp_path):
    write_png(tmp_path / "a.png")
    (tmp_path / "broken.png").write_bytes(b"nope")
    rows = [{"image": "a.png", "question": "q", "answer": "1"},
            {"image": "missing.png", "question": "q", "answer": "1"},
            {"image": "broken.png", "question": "q", "answer": "1"},
            {"image": "a.png", "question": "q " * 40, "answer": "1"}]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    cfg = _config(tmp_path, {"train": str(tmp_path / "t.jsonl"), "format": "vqa", "on_bad_record": "skip",
                             "max_length": 60})
    res = CliRunner().invoke(app, ["data", "inspect", cfg, "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["ok"] == 1
    assert rep["bad"] == {"missing media": 1, "corrupt media": 1, "too long": 1}


def test_inspect_error_policy_exits_2_with_where_and_fix(tmp_path):
    (tmp_path / "t.jsonl").write_text(json.dumps({"image": "gone.png", "question": "q", "answer": "1"}) + "\n")
    cfg = _config(tmp_path, {"train": str(tmp_path / "t.jsonl"), "format": "vqa"})
    res = CliRunner().invoke(app, ["data", "inspect", cfg])
    assert res.exit_code == 2
    assert "gone.png" in res.output and "t.jsonl:1" in res.output


def test_inspect_counts_every_bad_record_under_the_error_policy_too(tmp_path):
    """Inspection does not stop at the first bad record: it counts all by reason, names the one training
    would stop at, and exits 1."""
    write_png(tmp_path / "a.png")
    rows = [{"image": "a.png", "question": "q", "answer": "1"}, {"image": "gone.png", "question": "q", "answer": "1"},
            {"image": "a.png", "question": "q", "answer": {"x": 1}}, {"image": "gone2.png", "question": "q", "answer": "1"}]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    cfg = _config(tmp_path, {"train": str(tmp_path / "t.jsonl"), "format": "vqa"})
    res = CliRunner().invoke(app, ["data", "inspect", cfg, "--json"])
    assert res.exit_code == 1, res.output
    rep = json.loads(res.output)
    assert rep["ok"] == 1 and rep["bad"] == {"missing media": 2, "bad type": 1}
    assert any(n.startswith("data.on_bad_record=error: training would stop at") and "t.jsonl:2" in n
               for n in rep["notes"])
