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
    col = Collator(0)
    full = [b["input_ids"][:, 0].tolist() for b in make_dataloader(_DS(), col, 3, seed=5, epoch=2)]
    order = [i + 1 for i in epoch_order(10, 5, 2)]
    assert [x for b in full for x in b] == order
    resumed = [b["input_ids"][:, 0].tolist() for b in make_dataloader(_DS(), col, 3, seed=5, epoch=2, skip_batches=2)]
    assert resumed == full[2:]
    loader = make_dataloader(_DS(), col, 3, num_workers=1)
    assert loader.multiprocessing_context.get_start_method() == "spawn"
