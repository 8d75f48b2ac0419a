import math

import pytest

from mmtune.data.batches import BatchStream, micro_batches_of_epoch
from mmtune.evaluate import metrics as M
from mmtune.train.schedule import lr_factor


def test_metrics_on_known_values():
    assert M.exact_match(["3", " Three.", "4"], [["3"], ["three"], ["5"]]) == pytest.approx(2 / 3)
    assert M.mae(["3", "there are 5", "no idea"], [["4"], ["5"], ["2"]]) == pytest.approx((1 + 0 + 2) / 3)  # "no idea" = 0
    assert M.relaxed_accuracy(["10.4", "cat"], [["10"], ["cat"]]) == 1.0
    assert M.relaxed_accuracy(["11"], [["10"]]) == 0.0
    assert M.anls(["hello world"], [["hello world!"]]) == pytest.approx(1 - 1 / 12)  # the scorer keeps "!"
    assert M.anls(["abc"], [["xyz"]]) == 0.0
    assert M.vqa_accuracy(["yes"], [["yes", "yes", "no"]]) == pytest.approx((1 / 3 + 1 / 3 + 2 / 3) / 3)  # leave-one-out
    assert M.f1(["the red car"], [["red car"]]) == 1.0  # SQuAD drops articles
    assert M.f1(["red car"], [["blue car"]]) == pytest.approx(0.5)


def test_best_constant_baseline():
    train = ["1", "2", "2", "3", "6"]
    refs = [["2"], ["2"], ["5"]]
    b = M.best_constant_baseline(["exact_match", "mae"], train, refs)
    assert b["exact_match"] == pytest.approx(2 / 3)  # mode "2"
    assert b["mae"] == pytest.approx((0 + 0 + 3) / 3)  # median 2


def test_schedule_warmup_then_cosine_to_zero():
    f = [lr_factor(s, warmup=4, total=20, kind="cosine") for s in range(20)]
    assert f[:4] == [0.25, 0.5, 0.75, 1.0]
    assert f[4] == pytest.approx(1.0) and all(a >= b for a, b in zip(f[4:], f[5:]))
    assert lr_factor(20, warmup=4, total=20, kind="cosine") == pytest.approx(0.0)
    assert lr_factor(12, warmup=4, total=20, kind="linear") == pytest.approx(0.5)
    assert math.isclose(lr_factor(7, warmup=0, total=9, kind="constant"), 1.0)


def test_batch_stream_resumes_identically_and_shards_disjointly():
    full = BatchStream(23, seed=3, micro_batch_size=4)
    seq = [full.next() for _ in range(13)]  # crosses two epoch boundaries
    part = BatchStream(23, seed=3, micro_batch_size=4)
    first = [part.next() for _ in range(6)]
    resumed = BatchStream(23, seed=3, micro_batch_size=4, **part.position())
    assert first + [resumed.next() for _ in range(7)] == seq
    r0 = micro_batches_of_epoch(20, seed=1, epoch=0, micro_batch_size=2, rank=0, world_size=2)
    r1 = micro_batches_of_epoch(20, seed=1, epoch=0, micro_batch_size=2, rank=1, world_size=2)
    a, b = {i for x in r0 for i in x}, {i for x in r1 for i in x}
    assert not a & b and len(a) == len(b) == 10


def test_too_small_dataset_is_a_config_error():
    from mmtune.errors import ConfigError

    with pytest.raises(ConfigError, match="micro_batch_size"):
        BatchStream(3, seed=0, micro_batch_size=4)
