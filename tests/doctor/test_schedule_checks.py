"""MM035: schedules that cannot work, against what train/schedule.py and the loop really do."""

from __future__ import annotations

import pytest
from doctor_helpers import TINY_VL


def _tree(train=None, eval_=None):
    return {**TINY_VL, "train": {"max_steps": 100, **(train or {})}, "eval": eval_ or {}}


@pytest.mark.parametrize("warmup,scheduler", [(101, "cosine"), (150, "linear"), (300, "constant")])
def test_warmup_longer_than_the_run_is_an_error(doctor, warmup, scheduler):
    from mmtune.train.schedule import lr_factor

    # the premise, from the scheduler itself: the LR never reaches its set value
    assert max(lr_factor(s, warmup=warmup, total=100, kind=scheduler) for s in range(100)) < 1.0
    rep = doctor(_tree({"warmup_steps": warmup, "scheduler": scheduler}), "MM035")
    (f,) = rep.findings
    assert (f.code, f.severity, f.where, f.fix) == ("MM035", "error", "train.warmup_steps", "train.warmup_steps=10")
    assert f"train.warmup_steps={warmup} > train.max_steps=100" in f.message
    assert ("decay never runs" in f.message) == (scheduler != "constant")


def test_warmup_as_long_as_the_run_warns(doctor):
    from mmtune.train.schedule import lr_factor

    factors = [lr_factor(s, warmup=100, total=100, kind="cosine") for s in range(100)]
    assert factors[-1] == 1.0 and max(factors[:-1]) < 1.0  # train.lr only at the last step, no decay
    (f,) = doctor(_tree({"warmup_steps": 100}), "MM035").findings
    assert f.severity == "warning" and f.fix == "train.warmup_steps=10"
    # one step with one warmup step (the smoke run's shape) runs at train.lr: silent
    assert doctor(_tree({"max_steps": 1, "warmup_steps": 1}), "MM035").findings == []


def test_intervals_that_never_trigger_warn(doctor):
    rep = doctor(_tree({"save_every": 500}, {"every": 200}), "MM035")
    assert rep.errors == []
    by_key = {f.where: f for f in rep.findings}
    assert set(by_key) == {"eval.every", "train.save_every"}
    assert by_key["eval.every"].fix == "eval.every=25" and by_key["train.save_every"].fix == "train.save_every=25"


@pytest.mark.parametrize("train,eval_", [
    ({}, {}),  # defaults: no warmup, final evaluation/checkpoint only: nothing set that cannot work
    ({"warmup_steps": 99, "save_every": 100}, {"every": 100}),  # the edges still work
    ({"warmup_steps": 10, "scheduler": "linear", "save_every": 30}, {"every": 7}),  # non-divisors are fine
])
def test_working_schedules_are_silent(doctor, train, eval_):
    from mmtune.train.schedule import lr_factor

    # and a decay cannot reach zero before the end: the last step's factor is still positive
    w = train.get("warmup_steps", 0)
    assert lr_factor(99, warmup=w, total=100, kind=train.get("scheduler", "cosine")) > 0
    assert doctor(_tree(train, eval_), "MM035").findings == []
