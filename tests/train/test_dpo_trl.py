"""DPO against TRL's DPOTrainer (trl is the oracle): the same records give the same token batch, and the
same model and batch give the same loss and logged rewards, for the sigmoid loss, label smoothing and IPO.

The model is TRL's own: a tiny Qwen2 (a real transformers class) that TRL wraps with a new LoRA adapter
(peft_config), whose B matrices are then set to random values so the policy differs from the reference
(the base with adapters disabled, in both tools)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")

ROWS = [
    {"prompt": [{"role": "user", "content": "How many circles are there?"}],
     "chosen": [{"role": "assistant", "content": "3"}], "rejected": [{"role": "assistant", "content": "four circles"}]},
    {"prompt": [{"role": "user", "content": "Name the colour."}],
     "chosen": [{"role": "assistant", "content": "red"}],
     "rejected": [{"role": "assistant", "content": "blue, I think, or maybe green"}]},
    {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is it day?"}],
     "chosen": [{"role": "assistant", "content": "yes"}], "rejected": [{"role": "assistant", "content": "yes it is"}]},
]


def _trl_trainer(tmp_path, rows, **dpo):
    from datasets import Dataset
    from peft import LoraConfig
    from trl import DPOConfig, DPOTrainer

    from mmtune.models.tiny import build_tiny

    model, tok = build_tiny("tiny/qwen2")
    args = DPOConfig(output_dir=str(tmp_path / "trl"), report_to=[], per_device_train_batch_size=len(rows),
                     use_cpu=True, bf16=False, fp16=False, **dpo)
    tr = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok,
                    peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in tr.model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    tr.model.train()
    return tr, tok


def _ours(tok, rows, tmp_path, model_mask=True):
    """mmtune's pair records, encoded and collated as the loop does (`model_mask=False`: the padding mask kept as
    token_mask, as a run under SDPA does: attention.padding_mask)."""
    import json

    from mmtune.config import load_config
    from mmtune.data.collate import Collator
    from mmtune.data.encode import Encoder
    from mmtune.data.preference import PairCollator, PairEncoder
    from mmtune.data.sources import load_records

    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = load_config(None, ["model.name=tiny/qwen2", f"data.train={path}", "data.format=preference",
                             "train.objective=dpo"])
    records = load_records(str(path), cfg.data, split="train").records
    enc = PairEncoder(Encoder(tok, None, cfg))
    return PairCollator(Collator(tok.pad_token_id, model_mask=model_mask))([enc.encode(r) for r in records])


def _trl_batch(tr, n):
    return tr.data_collator([tr.train_dataset[i] for i in range(n)])


def _ours_loss(model, batch, **dpo):
    from mmtune.config.schema import DPOConfig
    from mmtune.objectives.dpo import DPO, AdaptersOff

    obj = DPO(DPOConfig(**dpo), AdaptersOff())
    total, _, stats = obj.loss_sum(model, batch)
    n = obj.count(batch)
    return float(total) / n, obj.parts({k: float(v) for k, v in stats.items()}, n)


def test_the_same_records_make_trls_token_batch(tmp_path):
    tr, tok = _trl_trainer(tmp_path, ROWS)
    theirs = _trl_batch(tr, len(ROWS))
    ours = _ours(tok, ROWS, tmp_path)
    # Both pad on the right to the longest row: the same ids, attention and completion, row for row.
    width = ours["input_ids"].shape[1]
    assert theirs["input_ids"].shape[1] == width
    mask = theirs["attention_mask"].bool()
    assert torch.equal(ours["attention_mask"].bool(), mask)
    assert torch.equal(ours["input_ids"][mask], theirs["input_ids"][mask])
    assert torch.equal(ours["labels"] != -100, theirs["completion_mask"].bool())
    assert ours["pair_media"] == ()


@pytest.mark.parametrize("dpo", [{"beta": 0.1}, {"beta": 0.5}, {"beta": 0.2, "loss": "ipo"}],
                         ids=["sigmoid", "sigmoid-beta0.5", "ipo"])
def test_loss_and_rewards_equal_trls_on_the_same_model_and_batch(tmp_path, dpo):
    trl_args = {"beta": dpo["beta"], "loss_type": [dpo.get("loss", "sigmoid")]}
    tr, tok = _trl_trainer(tmp_path, ROWS, **trl_args)
    batch = _ours(tok, ROWS, tmp_path)
    trl_batch = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                 "completion_mask": (batch["labels"] != -100).long()}
    expected = float(tr._compute_loss(tr.model, trl_batch, False))
    logged = {k: v[-1] for k, v in tr._metrics["train"].items()}
    loss, parts = _ours_loss(tr.model, batch, **dpo)
    assert abs(loss) > 1e-3 and parts["rewards/margins"] != 0  # the policy is not the reference
    assert loss == pytest.approx(expected, rel=1e-5, abs=1e-6)
    unmasked = _ours(tok, ROWS, tmp_path, model_mask=False)  # causal attention without the padding mask: the same
    assert "attention_mask" not in unmasked and unmasked["pair_media"] == ()
    assert (unmasked["token_mask"] == 0).any()  # the rows do pad
    assert _ours_loss(tr.model, unmasked, **dpo)[0] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    for k in ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen",
              "logps/rejected"):
        assert parts[k] == pytest.approx(logged[k], rel=1e-4, abs=1e-5), k  # fp32 sums in another order


def test_label_smoothing_equals_trls_conservative_dpo(tmp_path):
    """TRL 1.16's sigmoid loss has no label smoothing; its `aot` loss is cDPO's formula on the sorted log-ratio
    differences of a batch, which for a batch of one pair is the pair's own: compared pair by pair."""
    tr, tok = _trl_trainer(tmp_path, ROWS, beta=0.3, loss_type=["aot"], label_smoothing=0.2)
    for i in range(len(ROWS)):
        batch = _ours(tok, [ROWS[i]], tmp_path)
        trl_batch = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                     "completion_mask": (batch["labels"] != -100).long()}
        expected = float(tr._compute_loss(tr.model, trl_batch, False))
        loss, _ = _ours_loss(tr.model, batch, beta=0.3, label_smoothing=0.2)
        assert loss == pytest.approx(expected, rel=1e-5, abs=1e-6)
    smooth, _ = _ours_loss(tr.model, batch, beta=0.3, label_smoothing=0.2)
    plain, _ = _ours_loss(tr.model, batch, beta=0.3)
    assert smooth != pytest.approx(plain)


def test_qwen2_vl_pairs_share_their_pixels_and_match_trls_vision_dpo(tmp_path):
    """Tiny Qwen2-VL through TRL's vision collator: the same tokens per row, the pixels TRL collates twice
    (once per side) held once by mmtune, and the same loss on the same model and batch."""
    import json

    from datasets import Dataset
    from peft import LoraConfig
    from PIL import Image
    from trl import DPOConfig, DPOTrainer

    from mmtune.config import load_config
    from mmtune.data.preference import PairCollator
    from mmtune.data.sources import load_records
    from mmtune.models.tiny import build_tiny
    from mmtune.objectives import make_objective
    from mmtune.resolve import resolve_here

    sizes = [(56, 56), (84, 56)]
    for i, s in enumerate(sizes):
        Image.new("RGB", s, (200, 40 * i, 10)).save(tmp_path / f"img{i}.png")
    answers = [("3", "four circles"), ("green", "blue I think")]
    rows = [{"images": [f"img{i}.png"],
             "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": q}]}],
             "chosen": [{"role": "assistant", "content": [{"type": "text", "text": c}]}],
             "rejected": [{"role": "assistant", "content": [{"type": "text", "text": r}]}]}
            for i, (q, (c, r)) in enumerate(zip(["How many circles?", "Colour?"], answers))]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = load_config(None, ["model.name=tiny/qwen2-vl", f"data.train={path}", "data.format=preference",
                             "train.objective=dpo", "train.device=cpu", "train.precision=fp32"])
    resolved = resolve_here(cfg)
    from mmtune.data.encode import Encoder
    from mmtune.data.preference import PairEncoder

    enc = PairEncoder(Encoder.for_run(resolved))
    from mmtune.data.collate import Collator

    ours = PairCollator(Collator(resolved.pad_token_id))(
        [enc.encode(r) for r in load_records(str(path), cfg.data, split="train").records])

    model, _ = build_tiny("tiny/qwen2-vl")
    trl_rows = [{**r, "images": [Image.open(tmp_path / r["images"][0]).convert("RGB")]} for r in rows]
    args = DPOConfig(output_dir=str(tmp_path / "trl"), report_to=[], per_device_train_batch_size=2, use_cpu=True,
                     bf16=False, fp16=False, max_length=None, beta=0.2)
    tr = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(trl_rows), processing_class=resolved.processor,
                    peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in tr.model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    tr.model.train()
    theirs = tr.data_collator([dict(tr.train_dataset[i]) for i in range(2)])
    for row in range(4):  # the same tokens and completion per row, whatever each tool's padding
        keep_o, keep_t = ours["attention_mask"][row].bool(), theirs["attention_mask"][row].bool()
        assert ours["input_ids"][row][keep_o].tolist() == theirs["input_ids"][row][keep_t].tolist()
        assert (ours["labels"][row][keep_o] != -100).tolist() == theirs["completion_mask"][row][keep_t].bool().tolist()
    assert set(ours["pair_media"]) == {"pixel_values", "image_grid_thw"}
    assert torch.allclose(torch.cat([ours["pixel_values"]] * 2), theirs["pixel_values"], atol=1e-6)
    assert torch.equal(torch.cat([ours["image_grid_thw"]] * 2), theirs["image_grid_thw"])

    same = {"input_ids": ours["input_ids"], "attention_mask": ours["attention_mask"],
            "completion_mask": (ours["labels"] != -100).long(), "pixel_values": torch.cat([ours["pixel_values"]] * 2),
            "image_grid_thw": torch.cat([ours["image_grid_thw"]] * 2)}
    if "mm_token_type_ids" in ours:
        same["mm_token_type_ids"] = ours["mm_token_type_ids"]
    expected = float(tr._compute_loss(tr.model, same, False))
    obj = make_objective(cfg.model_copy(update={"train": cfg.train.model_copy(update={"dpo": cfg.train.dpo.model_copy(
        update={"beta": 0.2})})}))
    total, _, stats = obj.loss_sum(tr.model, ours)
    assert float(stats["rewards/margins"]) != 0
    assert float(total) / obj.count(ours) == pytest.approx(expected, rel=1e-5, abs=1e-6)
