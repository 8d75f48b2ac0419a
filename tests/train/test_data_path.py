"""The loop's data path: records encoded once (served from the start-up cache), records past the cache
encoded when drawn with late failures following data.on_bad_record, length grouping resumable
mid-epoch, and the data-wait and padding fractions reported per run."""

import json
from pathlib import Path

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.errors import DataError
from mmtune.train.loop import train


def _rows(out: Path):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]


def _corrupt_images(cfg, which=None):
    folder = Path(cfg.data.train).parent
    for p in sorted(folder.glob("img*.png")):
        if which is None or p.name == which:
            p.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)  # a PNG signature, then nothing decodable


def test_cached_records_are_never_encoded_again(tiny_vl_config):
    """Every image is corrupted after the start-up scan: a run served from the cache does not notice."""
    cfg = load_config(tiny_vl_config(train={"max_steps": 4}), ["data.eval=null"])
    run = build_run(cfg)
    assert len(run.encode_cache) == len(run.train_set.records) and not run.encode_cache.full
    _corrupt_images(cfg)
    summary = train(run)
    assert summary["steps"] == 4 and summary["skipped_records"] == {}
    assert 0 <= summary["data_wait_fraction"] < 1
    assert 0 <= summary["padding_fraction"] < 1
    rows = _rows(Path(cfg.output_dir))
    assert all(0 <= r["data_wait_s"] <= r["step_time_s"] for r in rows)


def test_records_past_the_cache_are_encoded_when_drawn_and_late_failures_follow_the_policy(tiny_vl_config):
    cfg = load_config(tiny_vl_config(train={"max_steps": 6}),
                      ["data.eval=null", "data.cache_mb=0", "data.on_bad_record=skip"])
    run = build_run(cfg)
    assert len(run.encode_cache) == 0 and len(run.train_set.records) == 12
    _corrupt_images(cfg, "img3.png")  # found only when the loop decodes it
    summary = train(run)
    assert summary["steps"] == 6  # 24 draws over 12 records: img3 came up at least once
    assert summary["skipped_records"] == {"corrupt media": 1}

    strict = load_config(tiny_vl_config(train={"max_steps": 6}),
                         ["data.eval=null", "data.cache_mb=0", f"output_dir={cfg.output_dir}2"])
    run = build_run(strict)
    _corrupt_images(strict, "img5.png")
    with pytest.raises(DataError) as e:
        train(run)
    assert "img5.png" in str(e.value) and "data.jsonl:6" in e.value.where
    assert "on_bad_record=skip" in e.value.fix


def test_length_grouped_run_resumes_identically(tiny_vl_config, tmp_path):
    n = 3
    def cfg(name):
        return load_config(tiny_vl_config(train={"max_steps": 2 * n, "save_every": n}, adapter={"dropout": 0.1}),
                           ["data.eval=null", "data.group_by_length=true", f"output_dir={tmp_path / name}"])
    train(build_run(cfg("straight")))
    assert train(build_run(cfg("broken")), stop_after=n) is None
    train(build_run(cfg("broken")))
    a, b = _rows(tmp_path / "straight"), _rows(tmp_path / "broken")
    assert [r["step"] for r in b] == list(range(1, 2 * n + 1))
    for x, y in zip(a, b):
        assert abs(x["loss"] - y["loss"]) < 1e-6, (x, y)
