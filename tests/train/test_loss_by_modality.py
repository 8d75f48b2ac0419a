"""The loss per modality of a run mixing image, video and text-only records (data/modality.py): logged beside the
loss in training (`loss/<modality>`, `answer_tokens/<modality>`) and evaluation (`eval_loss/<modality>`), equal to
the hand computation from each record's own loss, weighting back to the loss, and drawn by `mmtune report`;
a one-modality run logs as before."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mmtune.config import load_config


def _mixed_data(folder, n_image=3, n_text=3, n_video=2):
    """Image, text-only and video (a folder of frames) records, interleaved, answers of different lengths."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(max(n_image, n_text, n_video)):
        if i < n_image:
            Image.new("RGB", (56, 56), (40 * i, 120, 90)).save(folder / f"img{i}.png")
            rows.append(("image", [{"type": "image", "path": f"img{i}.png"}, {"type": "text", "text": "What colour?"}],
                         "green" + " and red" * i))
        if i < n_text:
            rows.append(("text", [{"type": "text", "text": f"Count to {i + 2}."}], " ".join(map(str, range(i + 3)))))
        if i < n_video:
            (folder / f"clip{i}").mkdir(exist_ok=True)
            for k in range(4):
                Image.new("RGB", (56, 56), (30 * k, 60 * i, 100)).save(folder / f"clip{i}" / f"{k:02d}.png")
            rows.append(("video", [{"type": "video", "path": f"clip{i}"}, {"type": "text", "text": "What moves?"}],
                         "a ball" + " rolls" * (i + 1)))
    path = folder / "data.jsonl"
    path.write_text("\n".join(json.dumps({"id": f"{kind}{n}", "messages": [
        {"role": "user", "content": content}, {"role": "assistant", "content": answer}]})
        for n, (kind, content, answer) in enumerate(rows)) + "\n")
    return path


def _args(tmp_path, data, *extra):
    return ["model.name=tiny/qwen2-vl", "model.gradient_checkpointing=false", f"data.train={data}",
            "data.max_length=256", "model.video_frames=4", "adapter.method=lora", "adapter.r=4", "adapter.dropout=0",
            "train.precision=fp32", "train.device=cpu", "train.seed=0", "logging.tensorboard=false",
            f"output_dir={tmp_path / 'run'}", *extra]


def _record_sums(run, records, impl="full"):
    """Each record's own (loss sum, answer tokens), alone in its batch, with the weights as they are."""
    import torch

    from mmtune.loss import eval_impl, loss_sum

    out = []
    with torch.no_grad():
        for r in records:
            s, n = loss_sum(run.model, run.collator([run.encoder.encode(r)]), eval_impl(impl))
            out.append((float(s), int(n)))
    return out


def _hand(records, sums) -> dict:
    from mmtune.data.modality import modality_of

    by: dict = {}
    for r, (s, n) in zip(records, sums):
        a = by.setdefault(modality_of(r), [0.0, 0])
        a[0] += s
        a[1] += n
    return by


@pytest.mark.parametrize("impl", ["full", "chunked"])
def test_step_loss_per_modality_is_the_hand_computed_token_weighted_mean(tmp_path, impl):
    """Micro-batches mixing modalities, accumulated over two: each `loss/<modality>` is the sum of that
    modality's records' own losses over their answer tokens, and the modalities weighted by their tokens give
    `loss` back."""
    from mmtune.build import build_run
    from mmtune.loss import LOSS_GROUP
    from mmtune.train.feed import EncodedDataset
    from mmtune.train.step import optimizer_step

    data = _mixed_data(tmp_path / "data", n_image=2, n_text=1, n_video=1)
    run = build_run(load_config(None, _args(tmp_path, data, f"train.loss_impl={impl}", "train.micro_batch_size=2",
                                            "train.max_steps=1")))
    assert run.loss_groups == ("text", "image", "video")
    assert any("records by modality text 1, image 2, video 1" in d and "exact per answer token" in d
               for d in run.decisions)
    records = run.train_set.records  # image0, text0, video0, image1
    hand = _hand(records, _record_sums(run, records, impl))
    ds = EncodedDataset(records, run.train_encoder, None, loss_groups=run.loss_groups)
    mbs = [run.train_collator(ds.__getitems__(ix)) for ix in ([0, 1], [2, 3])]  # image + text, video + image
    assert all(LOSS_GROUP in mb for mb in mbs)
    res = optimizer_step(run.model, run.optimizer, run.scheduler, mbs, accelerator=run.accelerator,
                         max_grad_norm=1.0, trainable_params=run.trainable_params, loss_impl=impl,
                         objective=run.objective, loss_groups=run.loss_groups)
    assert {k for k in res.parts if k.startswith("loss/")} == {"loss/text", "loss/image", "loss/video"}
    for m, (s, n) in hand.items():
        assert res.parts[f"answer_tokens/{m}"] == n
        assert res.parts[f"loss/{m}"] == pytest.approx(s / n, rel=2e-5)
    weighted = sum(res.parts[f"loss/{m}"] * res.parts[f"answer_tokens/{m}"] for m in hand)
    assert sum(res.parts[f"answer_tokens/{m}"] for m in hand) == res.answer_tokens
    assert weighted / res.answer_tokens == pytest.approx(res.loss, rel=1e-6)
    assert all(isinstance(v, (int, float)) for v in res.parts.values())  # plain numbers, read once


def test_a_loss_given_as_one_scalar_is_attributed_whole_or_counted_mixed(tmp_path):
    """model.loss=output (the model's own loss; Liger's kernel is the same case on CUDA): a micro-batch of one
    modality counts whole for it, one of several goes to `mixed`; the total is the model's own loss either way."""
    import torch

    from mmtune.build import build_run
    from mmtune.loss import grouped_loss_sums, loss_sum_and_output
    from mmtune.train.feed import EncodedDataset

    data = _mixed_data(tmp_path / "data", n_image=2, n_text=2, n_video=0)
    run = build_run(load_config(None, _args(tmp_path, data, "train.micro_batch_size=2")))
    records = run.train_set.records  # image0, text0, image1, text1
    ds = EncodedDataset(records, run.train_encoder, None, loss_groups=run.loss_groups)
    sums = _record_sums(run, records)
    model = run.model
    model.mmtune_loss = "output"  # the model computes its loss itself from `labels` (transformers' own)
    try:
        with torch.no_grad():
            for ix, col in (([0, 2], 1), ([1, 3], 0), ([0, 1], 2)):  # images; texts; image + text: mixed
                mb = run.train_collator(ds.__getitems__(ix))
                total, n, _, got = grouped_loss_sums(model, mb, len(run.loss_groups))
                assert float(total) == pytest.approx(float(loss_sum_and_output(model, mb)[0]), rel=1e-6)
                assert got[1].tolist() == [float(n) if c == col else 0.0 for c in range(3)]
                assert got[0][col].item() == pytest.approx(sum(sums[i][0] for i in ix), rel=2e-5)
    finally:
        del model.mmtune_loss
    assert run.loss_groups == ("text", "image")


def test_eval_loss_per_modality_is_the_hand_computation(tmp_path):
    from mmtune.build import build_run
    from mmtune.evaluate.run_eval import evaluate

    data = _mixed_data(tmp_path / "data", n_image=2, n_text=2, n_video=1)
    run = build_run(load_config(None, _args(tmp_path, data, f"data.eval={data}", "eval.batch_size=3",
                                            "train.loss_impl=chunked", "eval.generate=false")))
    assert run.eval_loss_groups == ("text", "image", "video")
    records = run.eval_set.records
    hand = _hand(records, _record_sums(run, records, "chunked"))
    metrics, _ = evaluate(run, records, with_generation=False)
    assert {k for k in metrics if k.startswith("eval_loss/")} == {f"eval_loss/{m}" for m in hand}
    for m, (s, n) in hand.items():
        assert metrics[f"eval_loss/{m}"] == pytest.approx(s / n, rel=2e-5)
    total_n = sum(n for _, n in hand.values())
    assert sum(metrics[f"eval_loss/{m}"] * n for m, (_, n) in hand.items()) / total_n == \
        pytest.approx(metrics["eval_loss"], rel=1e-5)


def test_a_mixed_run_logs_the_split_and_the_report_draws_it(tmp_path):
    from mmtune.build import build_run
    from mmtune.report import write_report
    from mmtune.train.loop import train

    data = _mixed_data(tmp_path / "data", n_image=3, n_text=3, n_video=2)
    run = build_run(load_config(None, _args(tmp_path, data, f"data.eval={data}", "train.micro_batch_size=2",
                                            "train.grad_accum=2", "train.max_steps=2", "eval.every=2",
                                            "eval.generate=false", "eval.batch_size=4")))
    train(run)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["kind"] == "train"]
    assert len(steps) == 2
    seen = set()
    for r in steps:
        mods = [k.split("/", 1)[1] for k in r if k.startswith("loss/")]
        seen |= set(mods)
        assert sum(r[f"answer_tokens/{m}"] for m in mods) == r["answer_tokens"]
        assert sum(r[f"loss/{m}"] * r[f"answer_tokens/{m}"] for m in mods) / r["answer_tokens"] == \
            pytest.approx(r["loss"], rel=1e-6)
    assert seen <= {"text", "image", "video"} and len(seen) >= 2
    ev = [r for r in rows if r["kind"] == "eval"][-1]
    assert {"eval_loss/text", "eval_loss/image", "eval_loss/video"} <= set(ev)
    write_report([tmp_path / "run"])
    plots = tmp_path / "run" / "plots"
    loss_svg = (plots / "loss.svg").read_text()
    assert loss_svg.count("<path") == 1 + len(seen) and all(f">{m}<" in loss_svg for m in seen)
    ev_svg = (plots / "eval_eval_loss.svg").read_text()
    assert ev_svg.count("<path") == 4 and ">video<" in ev_svg
    assert not (plots / "answer_tokens.svg").exists()  # counts are logged for the identity, not charted


def test_a_one_modality_run_logs_no_split(tmp_path, tiny_vl_config):
    from mmtune.build import build_run
    from mmtune.config import load_config as load
    from mmtune.loss import LOSS_GROUP
    from mmtune.train.loop import train

    cfg = load(tiny_vl_config(train={"max_steps": 1, "micro_batch_size": 2, "grad_accum": 1, "lr": 1e-3,
                                     "precision": "fp32", "device": "cpu", "seed": 0},
                              eval={"every": 1, "generate": False, "batch_size": 2}))
    run = build_run(cfg)
    assert run.loss_groups == () and run.eval_loss_groups == ()
    assert not any("by modality" in d for d in run.decisions)
    from mmtune.train.feed import EncodedDataset

    ds = EncodedDataset(run.train_set.records, run.train_encoder, None, loss_groups=run.loss_groups)
    assert LOSS_GROUP not in ds[0]  # the batches carry nothing new: the step takes its old path
    train(run)
    rows = [json.loads(x) for x in (Path(run.cfg.output_dir) / "metrics.jsonl").read_text().splitlines()]
    keys = {k for r in rows for k in r}
    assert "loss" in keys and "eval_loss" in keys
    assert not any(k.startswith(("loss/", "answer_tokens/", "eval_loss/")) for k in keys)
    assert all(math.isfinite(r["loss"]) for r in rows if r["kind"] == "train")


def test_the_extra_tower_rows_of_a_sharded_run_keep_the_loss_groups_shape(tmp_path):
    """media_balance's masked rows carry no group: merged with a batch that has one, the key is filled for them
    (it took the real batch's rows alone, a shape the loss could not index)."""
    from mmtune.build import build_run
    from mmtune.loss import LOSS_GROUP
    from mmtune.media_balance import merge_batches
    from mmtune.train.feed import EncodedDataset

    data = _mixed_data(tmp_path / "data", n_image=2, n_text=2, n_video=0)
    run = build_run(load_config(None, _args(tmp_path, data, "train.micro_batch_size=2")))
    ds = EncodedDataset(run.train_set.records, run.train_encoder, None, loss_groups=run.loss_groups)
    real = run.train_collator(ds.__getitems__([1, 3]))  # two text-only records, grouped
    extra = run.collator([run.encoder.encode(run.train_set.records[0])])  # an image row without a group
    merged = merge_batches(real, extra, run.collator)
    assert merged[LOSS_GROUP].shape == merged["input_ids"].shape
    assert (merged[LOSS_GROUP][2] == 0).all() and (merged[LOSS_GROUP][:2] == 0).all()  # text is group 0


def test_packed_rows_keep_each_records_modality(tmp_path):
    """data.packing puts image and text-only records in one row: `loss_group` is per token, concatenated with
    the row, so the row's tokens are split by their own record's modality (checked against each record)."""
    from mmtune.build import build_run
    from mmtune.compat.rope_index import rope_index_of
    from mmtune.data.modality import modality_of
    from mmtune.data.packing import PackedRows
    from mmtune.loss import LOSS_GROUP
    from mmtune.train.feed import EncodedDataset
    from mmtune.train.step import optimizer_step

    data = _mixed_data(tmp_path / "data", n_image=2, n_text=2, n_video=0)
    run = build_run(load_config(None, _args(tmp_path, data, "data.packing=true", "train.micro_batch_size=1",
                                            "train.max_steps=1")))
    records = run.train_set.records  # image0, text1, image2, text3
    hand = _hand(records, _record_sums(run, records))
    ds = PackedRows(EncodedDataset(records, run.train_encoder, None, loss_groups=run.loss_groups),
                    rope_index_of(run.unwrapped_model()))
    mbs = [run.train_collator(ds.__getitems__([[0, 1], [2, 3]]))]  # one micro-batch of two packed rows
    groups = mbs[0][LOSS_GROUP]
    assert groups.shape == mbs[0]["input_ids"].shape and set(groups[0].tolist()) == {0, 1}  # one row, two modalities
    res = optimizer_step(run.model, run.optimizer, run.scheduler, mbs, accelerator=run.accelerator,
                         max_grad_norm=1.0, trainable_params=run.trainable_params, objective=run.objective,
                         loss_groups=run.loss_groups)
    assert {modality_of(r) for r in records} == {"image", "text"}
    for m, (s, n) in hand.items():
        assert res.parts[f"answer_tokens/{m}"] == n
        assert res.parts[f"loss/{m}"] == pytest.approx(s / n, rel=1e-4)
