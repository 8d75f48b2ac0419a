"""A data source given as a glob pattern (data/globs.py): shards without a split's name, read in name order."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mmtune.config.schema import DataConfig
from mmtune.data.sources import load_records
from mmtune.errors import DataError

from .conftest import write_png


def _rec(i: int, image: str | None = None) -> dict:
    user = [{"type": "image", "path": image}, {"type": "text", "text": "How many?"}] if image else f"What is {i}+1?"
    return {"id": f"r{i}", "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": str(i + 1)}]}


def _shard(path, recs) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_a_pattern_reads_every_shard_in_name_order_with_media_from_its_folder(tmp_path):
    shards = tmp_path / "shards"
    _shard(shards / "part-00002.jsonl", [_rec(4), _rec(5, "img/a.png")])
    _shard(shards / "part-00001.jsonl", [_rec(0), _rec(1), _rec(2)])
    _shard(shards / "other.jsonl", [_rec(9)])  # not matched
    (shards / "img").mkdir()
    write_png(shards / "img" / "a.png")
    rs = load_records(str(shards / "part-*.jsonl"), DataConfig())
    assert [r.id for r in rs] == ["r0", "r1", "r2", "r4", "r5"] and not rs.skipped
    assert rs[3].source == f"{shards / 'part-00002.jsonl'}:1"
    assert rs[4].messages[0]["content"][0]["path"] == str(shards / "img" / "a.png")


def test_a_recursive_pattern_reads_sub_folders(tmp_path):
    _shard(tmp_path / "data" / "en" / "a.jsonl", [_rec(0)])
    _shard(tmp_path / "data" / "zh" / "deep" / "b.jsonl", [_rec(1), _rec(2)])
    rs = load_records(str(tmp_path / "data" / "**" / "*.jsonl"), DataConfig())
    assert [r.id for r in rs] == ["r0", "r1", "r2"]


def test_a_pattern_that_matches_nothing_or_non_data_files_is_one_error(tmp_path):
    _shard(tmp_path / "d" / "a.jsonl", [_rec(0)])
    write_png(tmp_path / "d" / "x.png")
    with pytest.raises(DataError) as e:
        load_records(str(tmp_path / "d" / "part-*.jsonl"), DataConfig())
    assert "matches no file" in e.value.what
    with pytest.raises(DataError) as e:
        load_records(str(tmp_path / "d" / "*"), DataConfig())
    assert "hold no records" in e.value.what and "x.png" in e.value.what and "*.jsonl" in e.value.fix


def test_the_doctor_checks_a_pattern_like_a_path(tmp_path):
    from tests.doctor.doctor_helpers import context_for, run_codes

    _shard(tmp_path / "s" / "part-1.jsonl", [_rec(i) for i in range(4)])
    ok = context_for(tmp_path, {"model": {"name": "tiny/qwen2"}, "data": {"train": str(tmp_path / "s" / "part-*.jsonl")}})
    assert not run_codes(ok, "MM026", "MM014", "MM031").errors
    bad = context_for(tmp_path, {"model": {"name": "tiny/qwen2"}, "data": {"train": str(tmp_path / "s" / "chunk-*.jsonl")}})
    errs = run_codes(bad, "MM026").errors
    assert errs and "matches no file" in errs[0].message and errs[0].where == "data.train"


def test_resume_sees_a_shard_added_to_the_pattern(tmp_path):
    from mmtune.config.schema import RunConfig
    from mmtune.train.data_fingerprint import changes, fingerprint

    _shard(tmp_path / "s" / "part-1.jsonl", [_rec(0)])
    cfg = RunConfig.model_validate({"model": {"name": "tiny/qwen2"}, "data": {"train": str(tmp_path / "s" / "part-*.jsonl")}})
    before = fingerprint(cfg)
    assert before["sources"]["data.train"] == {"kind": "pattern", "pattern": str(tmp_path / "s" / "part-*.jsonl"),
                                               "files": 1}
    _shard(tmp_path / "s" / "part-2.jsonl", [_rec(1)])
    diff = changes(before, fingerprint(cfg))
    assert diff[f"data file {(tmp_path / 's' / 'part-2.jsonl').resolve()}"] == ("absent", "added"), diff


@pytest.mark.slow
def test_mmtune_train_on_a_pattern(tmp_path):
    _shard(tmp_path / "s" / "part-1.jsonl", [_rec(i) for i in range(4)])
    _shard(tmp_path / "s" / "part-2.jsonl", [_rec(i) for i in range(4, 8)])
    out = tmp_path / "run"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model: {{name: tiny/qwen2}}\ndata: {{train: '{tmp_path / 's' / 'part-*.jsonl'}'}}\n"
                   f"train: {{max_steps: 2, micro_batch_size: 2, device: cpu, precision: fp32}}\noutput_dir: {out}\n")
    r = subprocess.run([sys.executable, "-m", "mmtune.cli", "train", str(cfg)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2


def test_a_pattern_streams_file_by_file(tmp_path):
    from mmtune.data.rows import stream_rows

    _shard(tmp_path / "s" / "part-2.jsonl", [_rec(2)])
    _shard(tmp_path / "s" / "part-1.jsonl", [_rec(0), _rec(1)])
    base, rows = stream_rows(str(tmp_path / "s" / "part-*.jsonl"), "train")
    assert base == tmp_path / "s"
    assert [w for w, _ in rows] == [f"{tmp_path / 's' / 'part-1.jsonl'}:1", f"{tmp_path / 's' / 'part-1.jsonl'}:2",
                                    f"{tmp_path / 's' / 'part-2.jsonl'}:1"]
