"""Sequence packing is exact: on the tiny twins, packed rows give the unpacked batch's loss and gradients
(fp32, 1e-5), records never see each other, M-RoPE positions are the model's own per record, and the rows
respect data.max_length in a deterministic, rank-consistent order."""

from __future__ import annotations

import pytest

from mmtune.compat.rope_index import rope_index_of
from mmtune.config.schema import RunConfig
from mmtune.data.collate import Collator
from mmtune.data.encode import Encoder
from mmtune.data.packing import pack_indices, pack_row, packed_micro_batches
from mmtune.data.records import Record
from mmtune.loss import loss_sum
from mmtune.models.families import FAMILIES

from .conftest import write_png

# (size or None for a text-only record, question, answer): lengths vary, media and text-only mixed.
RECORDS = [((64, 48), "What colour?", "red"), ((100, 80), "Count the things in it please, carefully.", "three of them"),
           (None, "Say hi", "hi there friend"), ((56, 112), "Shape?", "a tall one")]


def _setup(name, tmp_path, **overrides):
    """(tiny model in fp32 train mode, its collator, RECORDS encoded); `overrides` go to build_tiny's config."""
    import torch

    from mmtune.models.tiny import build_tiny

    torch.manual_seed(0)
    model, proc = build_tiny(name, **overrides)
    model = model.float().train()
    enc = Encoder(proc, None, RunConfig.model_validate({"model": {"name": name}}))
    items = []
    for i, (size, q, a) in enumerate(RECORDS):
        content = [{"type": "text", "text": q}]
        if size and "image" in enc.modalities:
            content.insert(0, {"type": "image", "path": str(write_png(tmp_path / f"{i}.png", (40 * i, 100, 200), size))})
        items.append(enc.encode(Record(str(i), f"f:{i}", [{"role": "user", "content": content},
                                                          {"role": "assistant", "content": a}])))
    return model, Collator(enc.tokenizer.pad_token_id or 0), items


def _loss_and_grads(model, batch):
    model.zero_grad()
    total, n = loss_sum(model, batch)
    (total / n).backward()
    return float(total.detach() / n), int(n), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


# every family that says it packs (Family.packable: decide_packing allows data.packing for it) is held to it here
@pytest.mark.parametrize("name", [f.tiny for f in FAMILIES.values() if f.packable and f.tiny])
def test_packed_rows_give_the_unpacked_loss_and_gradients(name, tmp_path):
    model, collate, items = _setup(name, tmp_path)
    loss0, n0, g0 = _loss_and_grads(model, collate(items))
    rope = rope_index_of(model)
    assert (rope is not None) == next(f.mrope for f in FAMILIES.values() if f.tiny == name)
    packed = collate([pack_row(items[:3], rope), pack_row(items[3:], rope)])  # rows of 3 and 1 records, padded
    assert "attention_mask" not in packed
    loss1, n1, g1 = _loss_and_grads(model, packed)
    assert n1 == n0 and abs(loss1 - loss0) < 1e-5, (loss0, loss1)
    assert g1.keys() == g0.keys()
    for k in g0:
        assert (g1[k] - g0[k]).abs().max() < 1e-5, k

    # The check can fail: positions counting on across a row's records (no restarts) let records see
    # each other, and the loss moves.
    import torch

    leaky = dict(packed)
    n = leaky["input_ids"].shape[-1]
    ar = torch.arange(n).expand(leaky["input_ids"].shape[0], n)
    leaky["position_ids"] = ar.expand(4, *ar.shape) if packed["position_ids"].dim() == 3 else ar
    _, _, g2 = _loss_and_grads(model, leaky)
    assert max(float((g2[k] - g0[k]).abs().max()) for k in g0) > 1e-3


@pytest.mark.parametrize("name", [f.tiny for f in FAMILIES.values() if f.packable and f.mrope and f.tiny])
def test_rope_index_is_the_models_own_per_record(name, tmp_path):
    model, _, items = _setup(name, tmp_path)
    rope = rope_index_of(model)
    inner = next(m for m in model.modules() if hasattr(type(m), "get_rope_index"))
    for it in items:
        if "mm_token_type_ids" not in it:
            continue
        kw = {k: it[k] for k in ("image_grid_thw",) if k in it}
        want, _ = inner.get_rope_index(it["input_ids"][None], mm_token_type_ids=it["mm_token_type_ids"][None], **kw)
        assert (rope(it) == want[:, 0]).all()
    import pickle

    assert (pickle.loads(pickle.dumps(rope))(items[0]) == rope(items[0])).all()  # DataLoader workers carry it


def test_a_packed_row_restarts_positions_and_masks_each_records_first_label(tmp_path):
    model, collate, items = _setup("tiny/qwen2-vl", tmp_path)
    row = pack_row(items[:2], rope_index_of(model))
    a, b = (int(it["input_ids"].shape[0]) for it in items[:2])
    assert row["position_ids"].shape == (4, a + b)
    assert row["position_ids"][0].tolist() == list(range(a)) + list(range(b))
    assert row["labels"][a] == -100 and row["token_mask"].sum() == a + b
    assert row["image_grid_thw"].tolist() == items[0]["image_grid_thw"].tolist() + items[1]["image_grid_thw"].tolist()
    batch = collate([row, pack_row(items[3:], rope_index_of(model))])
    assert batch["position_ids"].shape == (4, 2, a + b) and batch["token_mask"][1].sum() == items[3]["input_ids"].shape[0]


def test_rows_respect_the_cap_and_hold_every_record_once():
    import random

    rng = random.Random(0)
    lengths = [rng.randint(40, 200) for _ in range(3000)]  # 5x spread
    order = list(range(3000))
    rows = pack_indices(order, lengths, 512)
    assert sorted(i for r in rows for i in r) == order
    assert all(sum(lengths[i] for i in r) <= 512 for r in rows)
    fill = sum(lengths) / (512 * len(rows))
    assert fill > 0.95, fill  # best-fit-decreasing leaves little room
    assert pack_indices(order, lengths, 512) == rows  # deterministic
    with pytest.raises(ValueError, match="more than a packed row"):
        pack_indices([0], [600], 512)


def test_packed_batches_are_rank_consistent_and_resumable():
    import random

    from mmtune.data.batches import BatchStream, epoch_order

    rng = random.Random(1)
    lengths = [rng.randint(20, 100) for _ in range(500)]
    kw = dict(seed=3, epoch=1, micro_batch_size=2, capacity=256)
    one = packed_micro_batches(epoch_order(500, 3, 1), lengths, **kw, world_size=1)
    ranks = [packed_micro_batches(epoch_order(500, 3, 1), lengths, **kw, rank=r, world_size=2) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1])
    both = [row for r in ranks for mb in r for row in mb]
    assert len({i for row in both for i in row}) == sum(len(row) for row in both)  # no record on two ranks
    assert {i for row in both for i in row} <= {i for mb in one for row in mb for i in row}
    s = BatchStream(500, seed=3, micro_batch_size=2, lengths=lengths, pack=256)
    taken = [s.next() for _ in range(len(one) + 3)]  # across an epoch boundary
    again = BatchStream(500, seed=3, micro_batch_size=2, lengths=lengths, pack=256, **taken and {"epoch": 0, "index": 5})
    assert [again.next() for _ in range(len(taken) - 5)] == taken[5:]


def test_a_get_rope_index_needing_more_than_the_config_is_a_clear_error(tmp_path, monkeypatch):
    from mmtune.compat import CompatError

    model, _, items = _setup("tiny/qwen2-vl", tmp_path)
    rope = rope_index_of(model)
    original = rope.owner.get_rope_index

    def needs_a_module(self, *a, **k):  # what a transformers version that reads self.visual would do
        return original(self, *a, **k) if self.visual else None

    monkeypatch.setattr(rope.owner, "get_rope_index", needs_a_module)
    with pytest.raises(CompatError) as e:
        rope(items[0])
    assert "needs more than its config" in str(e.value) and e.value.where == "data.packing"
    assert "data.packing=false" in e.value.fix
