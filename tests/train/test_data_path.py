"""The loop's data path: records measured once at start-up and encoded once (when first drawn, then
served from the cache), records past the cache
encoded when drawn with late failures following data.on_bad_record, length grouping resumable
mid-epoch, and the data-wait and padding fractions reported per run."""

import json
from collections import Counter
from pathlib import Path

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.data.encode import Encoder
from mmtune.errors import DataError
from mmtune.train.feed import BAD, EncodedDataset
from mmtune.train.loop import train


def _rows(out: Path):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]


def _corrupt_images(cfg, which=None):
    folder = Path(cfg.data.train).parent
    for p in sorted(folder.glob("img*.png")):
        if which is None or p.name == which:
            p.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)  # a PNG signature, then nothing decodable


class CountingEncoder(Encoder):
    """The run's real Encoder, counting how often each record is measured and encoded (`prepare`: every
    encoding of a record starts there, one by one or in a micro-batch's one processor call)."""

    def count(self, what, record):
        self.counts = getattr(self, "counts", {"measure": Counter(), "encode": Counter()})
        self.counts[what][record.source] += 1

    def measure(self, record):
        self.count("measure", record)
        return super().measure(record)

    def prepare(self, record):
        self.count("encode", record)
        return super().prepare(record)


@pytest.fixture
def counting(monkeypatch):
    real = Encoder.for_run.__func__

    def for_run(cls, resolved):
        enc = real(cls, resolved)
        enc.__class__ = CountingEncoder
        return enc

    monkeypatch.setattr(Encoder, "for_run", classmethod(for_run))


def test_each_record_is_measured_once_at_start_up_and_encoded_once_in_the_run(tiny_vl_config, counting):
    """Start-up measures every record once and decodes no pixels; the loop encodes each record when first
    drawn and serves it from the cache after that (two epochs: still one encode each). Every image is then
    corrupted: records served from the cache do not notice."""
    cfg = load_config(tiny_vl_config(train={"max_steps": 6}), ["data.eval=null"])
    run = build_run(cfg)
    sources = [r.source for r in run.train_set.records]
    assert len(sources) == 12 and len(run.encode_cache) == 0
    assert run.encoder.counts["measure"] == Counter(sources) and not run.encoder.counts["encode"]
    assert run.startup["train_records_measured"] == 12 and run.startup["train_scan_s"] >= 0
    summary = train(run)  # 6 steps x 4 draws = 24 draws over 12 records: two epochs
    assert summary["steps"] == 6 and summary["skipped_records"] == {}
    assert run.encoder.counts["encode"] == Counter(sources) and run.encoder.counts["measure"] == Counter(sources)
    assert len(run.encode_cache) == 12 and not run.encode_cache.full
    assert summary["startup"]["train_records_measured"] == 12
    assert 0 <= summary["data_wait_fraction"] < 1
    assert 0 <= summary["padding_fraction"] < 1
    rows = _rows(Path(cfg.output_dir))
    assert all(0 <= r["data_wait_s"] <= r["step_time_s"] for r in rows)
    _corrupt_images(cfg)
    dataset = EncodedDataset(run.train_set.records, run.encoder, run.encode_cache)
    assert all(BAD not in dataset[i] for i in range(12))
    assert run.encoder.counts["encode"] == Counter(sources)


def test_records_past_the_cache_are_encoded_when_drawn_and_late_failures_follow_the_policy(tiny_vl_config):
    cfg = load_config(tiny_vl_config(train={"max_steps": 6}),
                      ["data.eval=null", "data.cache_mb=0", "data.on_bad_record=skip"])
    run = build_run(cfg)
    assert len(run.encode_cache) == 0 and len(run.train_set.records) == 12
    _corrupt_images(cfg, "img3.png")  # found only when the loop decodes it
    summary = train(run)
    assert summary["steps"] == 6  # 24 draws over 12 records: img3 came up at least once
    assert summary["skipped_records"] == {"corrupt media": 1}
    assert summary["train_records"] == 11  # found bad when drawn: counted as skipped, not also as trained

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


def test_a_run_under_one_epoch_keeps_no_encodings(tiny_vl_config):
    """6 steps x 4 draws of 40 records: none is drawn twice, so none is kept (memory the run would never
    read back); the decision says so. Two epochs of the same records keep them (the test above)."""
    cfg = load_config(tiny_vl_config(train={"max_steps": 6}), ["data.eval=null", "data.train=synthetic:counting",
                                                               "data.synthetic_train_size=40"])
    run = build_run(cfg)
    assert run.encode_cache.budget == 0 and run.encode_cache.full
    assert any("not kept: this run draws 24 records, under one epoch" in d for d in run.decisions), run.decisions
    summary = train(run)
    assert summary["steps"] == 6 and len(run.encode_cache) == 0
