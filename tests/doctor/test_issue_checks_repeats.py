"""MM068: exact repeats inside the training split (instructlab#1003, SkyThought#33), flagged from 5 %."""

from __future__ import annotations

import json

import pytest


def _rows(n, repeat=0):
    rows = [{"messages": [{"role": "user", "content": f"What is {i} + 1?"},
                          {"role": "assistant", "content": str(i + 1)}]} for i in range(n)]
    return rows + rows[:repeat]


def _tree(tmp_path, rows):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": str(path), "format": "messages"}}


def test_mm068_generation_script_wrote_examples_twice(doctor, tmp_path):
    rep = doctor(_tree(tmp_path, _rows(20, repeat=4)), "MM068")
    (f,) = rep.findings
    assert (f.code, f.severity) == ("MM068", "warning") and "4 of 24 records" in f.message
    assert "train.jsonl:21" in f.where  # the first copy: line 21 repeats line 1


def test_mm068_a_few_repeats_are_an_info(doctor, tmp_path):
    rep = doctor(_tree(tmp_path, _rows(60, repeat=1)), "MM068")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM068", "info")]


@pytest.mark.parametrize("tree", ["unique", "synthetic"])
def test_mm068_clean(doctor, tmp_path, tree):
    t = _tree(tmp_path, _rows(20)) if tree == "unique" else \
        {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": "synthetic:counting", "synthetic_train_size": 16}}
    assert doctor(t, "MM068").findings == []
