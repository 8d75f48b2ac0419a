"""The value-carrying fake mode: small integer tensors keep real values, floats stay fake."""

import pytest
import torch

from mmtune.plan.fake import NoValueError, ValueFakeMode, ValueFunctionMode
from mmtune.plan.tracker import StorageTracker


def test_integer_control_flow_is_real_and_floats_are_fake():
    mode = ValueFakeMode()
    grid = torch.tensor([[1, 4, 6], [2, 2, 2]])
    with mode, ValueFunctionMode(mode):
        w = torch.empty(1000, 1000)  # fake: nothing allocated
        assert mode.is_our_fake(w)
        sizes = (grid[:, 1] * grid[:, 2]).tolist()  # what Qwen2-VL's vision path does
        assert sizes == [24, 4]
        pos = torch.zeros(3, 1, 10, dtype=torch.long)  # factory of a small int tensor: real
        ids = torch.arange(10)
        pos[:, 0, ids > 3] = ids[ids > 3].view(1, -1).expand(3, -1)
        assert pos[0, 0].tolist() == [0, 0, 0, 0, 4, 5, 6, 7, 8, 9]
        emb = torch.empty(10, 8)
        picked = emb[ids > 6]  # boolean index with a known mask: static shape
        assert picked.shape == (3, 8) and mode.is_our_fake(picked)
        assert torch.tensor([ids.max() + 1, 2]).tolist() == [10, 2]


def test_reading_an_integer_computed_from_floats_raises():
    mode = ValueFakeMode()
    with mode:
        x = torch.empty(4, 5)
        with pytest.raises(NoValueError):
            x.argmax(-1).tolist()
        assert float(x.sum()) == 0.0  # float reads (loss logging) are neutral


def test_tracker_counts_live_storages_and_peak():
    mode = ValueFakeMode()
    tr = StorageTracker()
    with mode, tr:
        a = torch.empty(1024, dtype=torch.float32)  # 4 KiB
        b = a * 2  # +4 KiB
        v = b.view(2, 512)  # a view: no new storage
        del a
        c = torch.empty(256)  # +1 KiB after a's 4 KiB were freed
    assert tr.trace.peak_bytes == 8192
    assert tr.trace.live_bytes == 4096 + 1024
    del b, v, c


def test_a_real_parameter_beside_fake_ones_is_updated_as_a_fake():
    """A one-element parameter made while the plan builds the model is real (a scalar factory runs for real);
    Mllama's cross-attention gates are such. A full fine-tune's foreach AdamW updates it beside fake weights:
    the real one was turned into a constant fake, which FakeTensorMode refuses for a parameter (the doctor's
    crash sweep, llama3.2_11b_vision_lora adapter=full: MM099)."""
    from mmtune.plan.fake import ValueFakeMode

    gate = torch.nn.Parameter(torch.zeros(1))
    mode = ValueFakeMode()
    with mode:
        w = torch.nn.Parameter(torch.empty(64, 64))
        w.grad, gate.grad = torch.empty_like(w), torch.ones(1)
        opt = torch.optim.AdamW([w, gate], lr=1e-3, foreach=True)
        opt.step()
    assert mode.is_our_fake(w) and not mode.is_our_fake(gate)
    assert mode.is_our_fake(opt.state[w]["exp_avg"]) and opt.state[gate]["exp_avg"].shape == (1,)
