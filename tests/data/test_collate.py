"""Collator padding / concatenation / dtype, and the (seed, epoch)-only loader order."""

from __future__ import annotations

import torch

from mmtune.data.collate import Collator, epoch_order, make_dataloader


def item(n, patches=0, pad_val=1):
    d = {"input_ids": torch.arange(1, n + 1), "labels": torch.full((n,), 7), "attention_mask": torch.ones(n, dtype=torch.long),
         "mm_token_type_ids": torch.ones(n, dtype=torch.long)}
    if patches:
        d["pixel_values"] = torch.randn(patches, 12)
        d["image_grid_thw"] = torch.tensor([[1, 2, patches // 2]])
    return d


def test_pads_right_and_concatenates_media():
    a, b = item(5, patches=4), item(3, patches=6)
    batch = Collator(pad_token_id=0, compute_dtype=torch.bfloat16)([a, b])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5], [1, 2, 3, 0, 0]]
    assert batch["labels"][1].tolist() == [7, 7, 7, -100, -100]
    assert batch["attention_mask"][1].tolist() == [1, 1, 1, 0, 0]
    assert batch["mm_token_type_ids"][1].tolist() == [1, 1, 1, 0, 0]
    assert batch["pixel_values"].shape == (10, 12) and batch["pixel_values"].dtype == torch.bfloat16
    assert torch.equal(batch["pixel_values"][4:].float(), b["pixel_values"].to(torch.bfloat16).float())
    assert batch["image_grid_thw"].dtype == torch.long and batch["image_grid_thw"].shape == (2, 3)
    assert batch["input_ids"].device.type == "cpu"


def test_pad_id_and_mixed_batch():
    batch = Collator(pad_token_id=99, compute_dtype=torch.float16)([item(2), item(4, patches=2)])
    assert batch["input_ids"][0].tolist() == [1, 2, 99, 99]
    assert batch["pixel_values"].shape == (2, 12) and batch["pixel_values"].dtype == torch.float16


def test_epoch_order_depends_on_seed_and_epoch_only():
    assert epoch_order(10, 3, 0) == epoch_order(10, 3, 0)
    assert epoch_order(10, 3, 0) != epoch_order(10, 3, 1)
    assert sorted(epoch_order(10, 3, 1)) == list(range(10))


class _DS:
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return {"input_ids": torch.tensor([i + 1]), "labels": torch.tensor([i + 1]), "attention_mask": torch.tensor([1])}


def test_dataloader_order_and_resume_skip():
    from mmtune.data.batches import BatchStream, micro_batches_of_epoch
    from mmtune.train.feed import _FromStream

    col = Collator(0)
    args = dict(n=10, seed=5, micro_batch_size=3, epoch=2)
    loader = iter(make_dataloader(_DS(), col, _FromStream(args)))
    full = [next(loader)["input_ids"][:, 0].tolist() for _ in range(3)]
    order = [[i + 1 for i in b] for b in micro_batches_of_epoch(10, seed=5, epoch=2, micro_batch_size=3)]
    assert full == order and [x for b in full for x in b] == [i + 1 for i in epoch_order(10, 5, 2)][:9]
    resumed = iter(make_dataloader(_DS(), col, _FromStream({**args, "index": 2})))
    assert next(resumed)["input_ids"][:, 0].tolist() == full[2]
    stream = BatchStream(**args)
    assert [[i + 1 for i in stream.next()] for _ in range(3)] == full
    from mmtune.data.workers import LoaderPlan

    for method in ("spawn", "forkserver"):  # never fork (failure mode 20): what the plan says, applied
        plan = LoaderPlan(num_workers=1, start_method=method, persistent=True, prefetch_factor=3)
        loader = make_dataloader(_DS(), col, [[0, 1, 2]], plan=plan)
        assert loader.multiprocessing_context.get_start_method() == method
        assert loader.persistent_workers and loader.prefetch_factor == 3 and not loader.pin_memory
    assert make_dataloader(_DS(), col, [[0, 1, 2]]).num_workers == 0


def test_left_padding_for_generation():
    b = Collator(0, padding_side="left")([item(2), item(4)])
    assert b["input_ids"].tolist() == [[0, 0, 1, 2], [1, 2, 3, 4]]
    assert b["labels"][0].tolist() == [-100, -100, 7, 7] and b["attention_mask"][0].tolist() == [0, 0, 1, 1]
