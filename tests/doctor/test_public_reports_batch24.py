"""Broken setups from the twenty-fourth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 24:
out of memory mid-run, not at the first step"): a run that fits step 1 and dies later, when a longer record
arrives, at the first eval, at a save, from memory that grows. Rebuilt on tiny twins; the miss is fixed (the plan
measured the first 5000 distinct records and planned at their worst, so a longer record later in the data was never
planned), the rest pinned here or by the tests named in the docs.
"""

from __future__ import annotations

import json
import math

import pytest

from mmtune.config import load_config

LONG_AT = 55  # the long record's place: past the measured prefix


def _records(path, n=60, long_at=LONG_AT, long_words=100):
    with open(path, "w") as f:
        for i in range(n):
            answer = " ".join(["word"] * long_words) if i == long_at else "yes"
            f.write(json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"Question {i}?"},
                                                           {"role": "assistant", "content": answer}]}) + "\n")
    return path


def _resolved(path, *over):
    from mmtune.resolve import resolve_here

    return resolve_here(load_config(None, ["model.name=tiny/qwen2", f"data.train={path}", "data.max_length=1024",
                                           "train.micro_batch_size=2", *over]))


# ----------------------------------------------------------------------------- a longer record arrives later
# https://github.com/2U1/Qwen-VL-Series-Finetune/issues/88 ("OOM occurred at a specific point during model training"),
# https://github.com/hiyouga/LlamaFactory/issues/9075, https://github.com/om-ai-lab/VLM-R1/issues/164: a run that
# trains for hundreds of steps and dies on one record longer than any before it. The plan measured the first
# `max_records` distinct records only and planned at their worst: a longer record past them was never planned.
def test_records_past_the_measured_ones_are_planned_at_the_sequence_cap(tmp_path):
    from mmtune.data.encode import Encoder
    from mmtune.data.sources import load_records
    from mmtune.plan.batch import worst_case_batch

    resolved = _resolved(_records(tmp_path / "train.jsonl"))
    enc = Encoder.for_run(resolved)
    rs = load_records(resolved.cfg.data.train, resolved.cfg.data, split="train").records
    lengths = [enc.measure(r)["total"] for r in rs]
    assert max(lengths) == lengths[LONG_AT] > 10 * max(lengths[:50])  # the long one is past the first 50

    pb = worst_case_batch(resolved, max_records=50)  # 10 records not measured, the long one among them
    assert pb.tokens == resolved.cfg.data.max_length >= lengths[LONG_AT]
    assert pb.micro_batch["input_ids"].shape == (2, resolved.cfg.data.max_length)
    assert "the 10 records not measured may be as long as the 1024-token cap" in pb.source

    every = worst_case_batch(resolved, max_records=100)  # all measured: the real worst record, no bound
    assert every.tokens == lengths[LONG_AT] < resolved.cfg.data.max_length
    assert "not measured" not in every.source


def test_a_grpo_prompt_past_the_measured_ones_leaves_room_for_its_completion(tmp_path):
    from mmtune.plan.batch import worst_case_batch

    path = _records(tmp_path / "prompts.jsonl", n=30, long_at=-1)
    resolved = _resolved(path, "train.objective=grpo", "train.grpo.max_completion_length=256",
                         "train.grpo.generations=2")
    every = worst_case_batch(resolved, max_records=100)  # a record's length counts its completion budget
    assert every.micro_batch["input_ids"].shape[-1] < 256 < every.tokens < 1024
    pb = worst_case_batch(resolved, max_records=20)
    assert pb.tokens == 1024  # the cap, prompt and completion together
    assert pb.micro_batch["input_ids"].shape[-1] == 1024 - 256  # the prompt: the cap less the completion budget


# ----------------------------------------------------------------------------- memory that grows: logged values
# https://github.com/BatsResearch/labelmodels/issues/4, https://github.com/rballester/tntorch/pull/19,
# https://github.com/IBM/mi-prometheus/issues/111: a running loss summed as tensors keeps every step's graph alive.
def test_the_step_returns_plain_numbers_not_tensors(tmp_path):
    import torch

    from mmtune.build import build_run
    from mmtune.train.step import optimizer_step

    path = _records(tmp_path / "train.jsonl", n=8, long_at=-1)
    cfg = load_config(None, ["model.name=tiny/qwen2", f"data.train={path}", "train.micro_batch_size=2",
                             f"output_dir={tmp_path / 'out'}", "train.max_steps=1"])
    run = build_run(cfg)
    mbs = [run.collator([run.encoder.encode(r) for r in run.train_set.records[i:i + 2]]) for i in (0, 2)]
    res = optimizer_step(run.model, run.optimizer, run.scheduler, mbs, accelerator=run.accelerator,
                         max_grad_norm=1.0, trainable_params=run.trainable_params)
    assert type(res.loss) is float and math.isfinite(res.loss)
    assert res.grad_norm is None or type(res.grad_norm) is float
    assert not any(isinstance(v, torch.Tensor) for v in res.parts.values())
    assert all(p.grad is None for p in run.trainable_params)  # gradients freed (set_to_none) before the next step


# ----------------------------------------------------------------------------- the first eval: full logits again
# https://github.com/huggingface/transformers/issues/17089, https://github.com/unslothai/unsloth/issues/1147,
# https://github.com/NVIDIA-Merlin/Transformers4Rec/issues/693: training fits, the first evaluation runs out of
# memory on the eval batch's logits. A run whose loss is chunked (train.loss_impl, decided to keep the
# batch x sequence x vocabulary fp32 logits out of memory) evaluated with the full logits all the same.
def _eval_run(tmp_path, impl):
    from mmtune.build import build_run

    path = _records(tmp_path / "data.jsonl", n=8, long_at=3, long_words=20)
    cfg = load_config(None, ["model.name=tiny/qwen2", f"data.train={path}", f"data.eval={path}",
                             "train.micro_batch_size=2", "eval.batch_size=4", f"train.loss_impl={impl}",
                             f"output_dir={tmp_path / impl}", "train.max_steps=1", "train.seed=3"])
    return build_run(cfg)


def test_a_chunked_run_evaluates_without_the_full_logits(tmp_path):
    from mmtune.evaluate.run_eval import evaluate

    seen = {}
    losses = {}
    for impl in ("full", "chunked"):
        run = _eval_run(tmp_path, impl)
        assert run.cfg.train.loss_impl == impl
        head = run.unwrapped_model().get_output_embeddings()
        rows = []
        handle = head.register_forward_hook(lambda m, a, out, rows=rows: rows.append(out.shape[:-1].numel()))
        try:
            metrics, _ = evaluate(run, run.eval_set.records, with_generation=False)
        finally:
            handle.remove()
        seen[impl], losses[impl] = max(rows), metrics["eval_loss"]
    batch = run.collator([run.encoder.encode(r) for r in run.eval_set.records[:4]])
    assert seen["full"] == batch["input_ids"].numel()  # every position of the eval batch at once
    answer_rows = int((batch["labels"][:, 1:] != -100).sum())
    assert seen["chunked"] <= answer_rows < seen["full"]  # only answer rows, a chunk at a time
    assert losses["chunked"] == pytest.approx(losses["full"], rel=1e-5)


def test_the_plan_of_a_chunked_runs_eval_has_no_full_logits(tmp_path):
    from mmtune.plan import predict

    path = _records(tmp_path / "data.jsonl", n=8, long_at=3, long_words=60)
    peaks = {}
    for impl in ("full", "chunked"):
        cfg = load_config(None, ["model.name=tiny/qwen2", f"data.train={path}", f"data.eval={path}",
                                 "train.micro_batch_size=1", "eval.batch_size=8", "eval.generate=false",
                                 f"train.loss_impl={impl}"])
        peaks[impl] = predict(cfg, gpu="a100-40gb").eval["loss_peak_bytes"]
    assert peaks["chunked"] < peaks["full"]
