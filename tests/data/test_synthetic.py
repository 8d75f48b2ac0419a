"""The demo's synthetic counting set: deterministic, disjoint splits, answers match the drawing."""

from __future__ import annotations

import numpy as np

from mmtune.config.schema import DataConfig
from mmtune.data import synthetic
from mmtune.data.sources import load_records


def _pixels(r):
    return np.asarray(r.messages[0]["content"][0]["image"])


def test_deterministic_and_seeded():
    a = synthetic.make_counting(20, seed=1)
    b = synthetic.make_counting(20, seed=1)
    c = synthetic.make_counting(20, seed=2)
    assert [r.answer_text() for r in a] == [r.answer_text() for r in b]
    assert all(np.array_equal(_pixels(x), _pixels(y)) for x, y in zip(a, b))
    assert not all(np.array_equal(_pixels(x), _pixels(y)) for x, y in zip(a, c))


def test_splits_are_disjoint():
    train = set(synthetic.counting_layouts(600, 0, "train"))
    eval_recs = synthetic.make_counting(100, 0, "eval", train_size=600)
    eval_layouts = synthetic.counting_layouts(100, 0, "eval", exclude=train)
    assert len(eval_recs) == 100 and not (set(eval_layouts) & train)


def test_answer_matches_drawn_shapes():
    for r in synthetic.make_counting(30, seed=3):
        kind = r.messages[0]["content"][1]["text"].split()[2].rstrip("s")
        px = _pixels(r)
        colour = np.array(synthetic.COLOURS[kind])
        # Count grid cells whose centre pixel (a bit low, inside a triangle too) has the asked colour.
        c = synthetic.CELL
        n = sum(np.array_equal(px[row * c + int(0.6 * c), col * c + c // 2], colour)
                for row in range(synthetic.GRID) for col in range(synthetic.GRID))
        assert str(n) == r.answer_text()
        assert 1 <= int(r.answer_text()) <= synthetic.MAX_COUNT


def test_load_records_synthetic_sizes():
    """(How long it takes is measured by benchmarks/quick_paths.py, not asserted on a shared machine.)"""
    cfg = DataConfig(synthetic_train_size=600, synthetic_eval_size=50, synthetic_seed=4)
    tr = load_records("synthetic:counting", cfg, "train")
    ev = load_records("synthetic:counting", cfg, "eval")
    assert len(tr) == 600 and len(ev) == 50
    assert tr[0].messages[0]["content"][0]["image"].size == (112, 112)
    # Not a constant answer: every count 1..6 occurs.
    assert {r.answer_text() for r in tr} == {str(i) for i in range(1, 7)}
