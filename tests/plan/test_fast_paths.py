"""The plan's speed shortcuts give the trace of the slow path byte for byte (events, peak, costs)."""

import pytest

from mmtune.config import load_config
from mmtune.plan.batch import Declared

from .conftest import canonical_events

COMMON = ["data.max_length=128", "train.precision=fp32", "train.grad_accum=3"]
CASES = [
    (["model.name=tiny/qwen2", "adapter.method=lora", "model.gradient_checkpointing=true"], None),
    (["model.name=tiny/qwen2", "adapter.method=lora", "model.gradient_checkpointing=false",
      "train.precision=bf16"], None),
    (["model.name=tiny/qwen2", "adapter.method=full", "model.gradient_checkpointing=false"], None),
    (["model.name=tiny/qwen2-vl", "adapter.method=qlora", "model.gradient_checkpointing=true"],
     Declared(images=[(112, 112)])),
]


def _trace(over, declared, fast):
    from mmtune.plan.planner import resolve_for_plan, trace_config

    cfg = load_config(None, COMMON + over)
    _, _, ex, _ = trace_config(resolve_for_plan(cfg, "h100"), declared=declared, fast=fast)
    tr = ex.tracker.trace
    # Up to the last allocation: the frees after it (the model and optimizer going away when this
    # function returns) change no figure, and under pytest the first trace of a process keeps them alive.
    last = max(i for i, e in enumerate(tr.events) if e.nbytes > 0)
    events = canonical_events([(e.serial, e.nbytes, e.phase, e.tag) for e in tr.events[: last + 1]])
    storages = [(s.serial, s.nbytes, s.phase, s.tag, s.op) for s in tr.storages.values()]
    return events, storages, tr.costs, (tr.peak_bytes, tr.peak_index, tr.peak_phase), \
        (sorted(ex.param_serials.items()), sorted(ex.grad_serials), sorted(ex.state_serials))


@pytest.mark.parametrize("over,declared", CASES)
def test_fast_trace_is_identical_to_the_slow_trace(over, declared):
    fast = _trace(over, declared, True)
    slow = _trace(over, declared, False)
    assert len(fast[0]) > 100
    for a, b in zip(fast, slow):
        assert a == b


def test_fast_cache_keys_and_tensor_walks_equal_torchs(monkeypatch):
    """Every dispatch-cache key of a traced step, built by fake.py and by torch's own code, is equal;
    fake.py's walk over an op's arguments and outputs finds the tensors pytree finds, in order."""
    import torch

    from mmtune.compat.torch_internals import tree_leaves
    from mmtune.plan import fake
    from mmtune.plan.planner import resolve_for_plan, trace_config

    seen = {"n": 0, "fast_path": 0, "walks": 0}

    def same(x):
        a = fake._tensors_in(x, [])
        b = [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]
        assert len(a) == len(b) and all(u is v for u, v in zip(a, b))
        seen["walks"] += 1

    class Checked(fake.ValueFakeMode):
        def _dispatch(self, func, types, args=(), kwargs=None):
            same((args, kwargs))
            out = super()._dispatch(func, types, args, kwargs)
            same(out)
            return out

        def _cache_key(self, state, func, args, kwargs):
            self.fast = False
            try:
                slow = super()._cache_key(state, func, args, kwargs)
            finally:
                self.fast = True
            key = super()._cache_key(state, func, args, kwargs)
            assert key == slow and key.hashvalue == slow.hashvalue, func
            seen["n"] += 1
            return key

        def _fast_key_values(self, result, args):
            seen["fast_path"] += 1
            return super()._fast_key_values(result, args)

    monkeypatch.setattr(fake, "ValueFakeMode", Checked)
    cfg = load_config(None, COMMON + CASES[3][0])
    trace_config(resolve_for_plan(cfg, "h100"), declared=CASES[3][1])
    assert seen["n"] > 1000 and seen["fast_path"] > 1000 and seen["walks"] > 5000
