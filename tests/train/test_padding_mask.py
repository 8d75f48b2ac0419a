"""Right-padded training batches without their attention_mask (resolve: attention.padding_mask).

A family says it trains the same without the mask (Family.unmasked_right_padding); here every family with a tiny
twin is held to exactly what it says: a right-padded batch of records of different lengths gives the same loss and
gradients with and without the mask (fp32) where it says so, and different ones where it does not (the Omnis,
whose M-RoPE positions read the mask). Then the one decision, and the collator and loop that follow it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mmtune.config.schema import RunConfig
from mmtune.data.collate import Collator
from mmtune.loss import TOKEN_MASK, loss_sum, model_inputs
from tests.family_registry import DATA_FILE, TWINS, family_of_twin, first_medium

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence_runs import video_only  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "recipes" / "data"


def _records(twin: str, tmp_path: Path):
    """Three records of the twin's first medium whose questions differ in length: the batch pads on the right."""
    from mmtune.data.sources import load_records

    medium = first_medium(twin)
    if DATA_FILE[medium] is None:
        rows = [{"messages": [{"role": "user", "content": "What is 2 + 3?" + " Think." * (4 * i)},
                              {"role": "assistant", "content": str(5 + i)}]} for i in range(3)]
    else:
        rows = [json.loads(ln) for ln in (DATA / DATA_FILE[medium]).read_text().splitlines() if ln.strip()][:3]
        rows = [video_only(r) for r in rows] if medium == "video" else rows
        for i, row in enumerate(rows):
            row["messages"][0]["content"].append({"type": "text", "text": " Look closely." * (4 * i)})
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = RunConfig.model_validate({"model": {"name": twin}, "data": {"train": str(path), "media_root": str(DATA)}})
    return cfg, load_records(str(path), cfg.data, split="train").records


def _loss_and_grads(model, batch):
    model.zero_grad()
    total, n = loss_sum(model, batch)
    (total / n).backward()
    return float(total.detach() / n), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("twin", TWINS)
def test_a_family_trains_the_same_without_the_mask_exactly_where_it_says_so(twin, tmp_path):
    import torch

    from mmtune.data.encode import Encoder
    from mmtune.models.tiny import build_tiny

    torch.manual_seed(0)
    model, proc = build_tiny(twin)
    model = model.float().train()
    cfg, records = _records(twin, tmp_path)
    enc = Encoder(proc, None, cfg)
    masked = Collator(enc.tokenizer.pad_token_id or 0)([enc.encode(r) for r in records])
    assert (masked["attention_mask"] == 0).any(), "the records must pad for the check to mean anything"
    unmasked = Collator(enc.tokenizer.pad_token_id or 0, model_mask=False)([enc.encode(r) for r in records])
    assert "attention_mask" not in unmasked and torch.equal(unmasked[TOKEN_MASK], masked["attention_mask"])
    assert TOKEN_MASK not in model_inputs(unmasked)

    loss0, g0 = _loss_and_grads(model, masked)
    loss1, g1 = _loss_and_grads(model, unmasked)
    # relative to each gradient's size (a tiny random audio tower's run to 1e4): fp32 summation order, ~1e-7
    same = abs(loss1 - loss0) < 1e-5 and g0.keys() == g1.keys() and \
        all(float((g1[k] - g0[k]).abs().max()) <= 1e-5 * (1 + float(g0[k].abs().max())) for k in g0)
    assert family_of_twin(twin).unmasked_right_padding == same, (loss0, loss1)


def test_left_padding_cannot_leave_the_mask_out():
    with pytest.raises(ValueError, match="right"):
        Collator(0, padding_side="left", model_mask=False)


def _resolved(**over):
    from mmtune.resolve import gpu_target, local_target, resolve_run

    base = {"model": {"name": "tiny/qwen2"}, "data": {"train": "synthetic:arithmetic"}, "train": {"device": "cpu"}}
    for key, value in over.items():
        if key != "gpu":
            section, _, name = key.partition("__")
            base.setdefault(section, {})[name] = value
    cfg = RunConfig.model_validate(base)
    return resolve_run(cfg, gpu_target(over["gpu"]) if "gpu" in over else local_target("cpu"))


@pytest.mark.parametrize("over, given, why", [
    ({}, False, "verified exact for qwen2"),
    ({"model__name": "tiny/qwen2.5-omni"}, True, "not verified"),
    ({"model__attn_implementation": "eager"}, True, "eager attention"),
    ({"gpu": "A100-80GB", "model__attn_implementation": "flash_attention_2", "train__precision": "bf16"}, True,
     "varlen"),
    ({"gpu": "A100-80GB", "model__attn_implementation": "sdpa", "train__precision": "bf16"}, False, "causal"),
    ({"gpu": "T4", "model__attn_implementation": "sdpa", "train__precision": "fp16"}, True, "math kernel"),
    ({"train__objective": "grpo", "data__train": "synthetic:counting", "model__name": "tiny/qwen2-vl"}, True,
     "train.objective=grpo"),
])
def test_the_run_decides_once_whether_the_model_gets_the_mask(over, given, why):
    resolved = _resolved(**over)
    assert resolved.padding_mask is given
    d = resolved.decision("attention.padding_mask")
    assert d.value == ("given" if given else "left out") and why in d.reason
    assert Collator.for_run(resolved).model_mask is given


def test_a_packed_run_has_no_mask_to_leave_out():
    resolved = _resolved(data__packing=True, data__max_length=256)
    assert resolved.decision("attention.padding_mask") is None


def test_the_loop_trains_on_unmasked_batches_and_counts_their_tokens(tmp_path):
    """Through the real loop: the training batches carry token_mask (no attention_mask), the logged input tokens
    are the non-pad tokens, and the losses are those of the same run with the mask given."""
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    demo = Path(__file__).resolve().parents[2] / "recipes" / "demo_counting.yaml"
    losses, padding = {}, {}
    for attn in ("sdpa", "eager"):  # eager: the mask given (same math, a masked softmax)
        out = tmp_path / attn
        run = build_run(load_config(demo, [
            "model.name=tiny/qwen2", "data.train=synthetic:arithmetic", "data.eval=null", "data.synthetic_train_size=16",
            "train.max_steps=3", "train.micro_batch_size=4", "train.grad_accum=1", "train.device=cpu",
            f"model.attn_implementation={attn}", f"output_dir={out}", "logging.tensorboard=false",
            "train.resume=false"]))
        assert run.resolved.padding_mask is (attn == "eager")
        batch = run.train_collator([run.encoder.encode(r) for r in run.train_set.records[:4]])
        assert ("attention_mask" in batch) is (attn == "eager") and (TOKEN_MASK in batch) is (attn == "sdpa")
        train(run)
        rows = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
        losses[attn] = [r["loss"] for r in rows if r["kind"] == "train"]
        padding[attn] = [r["padding_fraction"] for r in rows if r["kind"] == "train"]
    assert len(losses["sdpa"]) == 3
    assert padding["sdpa"] == padding["eager"] and max(padding["sdpa"]) > 0  # pads counted from token_mask
    assert losses["sdpa"] == pytest.approx(losses["eager"], abs=1e-4)
