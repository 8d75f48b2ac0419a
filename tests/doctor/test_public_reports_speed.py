"""Broken setups from the sixteenth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 16: slow
training and performance footguns"): settings a run accepts that make it several times slower than the same run set
well. The two misses are fixed (MM181: fp32 or eager attention on a GPU that has the fast path; MM182: micro-batches
that are mostly padding); the rows mmtune already decides well are pinned here with the code `mmtune train` runs.
"""

from __future__ import annotations

import json

from doctor_helpers import context_for, run_codes

TEXT = {"model": {"name": "tiny/qwen2"}, "adapter": {"method": "lora", "r": 4}}


def _doctor(tmp_path, tree: dict, *codes: str, gpu: str | None = None):
    import yaml

    from mmtune.doctor.registry import all_checks
    from mmtune.doctor.runner import make_context, run_checks

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(dict(tree, output_dir=str(tmp_path / "run"))))
    return run_checks(make_context(path, gpu=gpu), [c for c in all_checks() if c.code in codes])


def _tree(**sections) -> dict:
    tree = {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": "synthetic:counting", "synthetic_train_size": 8},
            "adapter": {"method": "lora", "r": 4}}
    for k, v in sections.items():
        tree[k] = {**tree.get(k, {}), **v}
    return tree


# https://github.com/huggingface/transformers/issues/15026, https://github.com/tatsu-lab/stanford_alpaca/issues/32,
# https://github.com/GerrySant/multimodalhugs/issues/34: fp32 training on an A100 (tensor cores idle at fp32: 19.5
# against 312 TFLOP/s); mmtune kept train.precision=fp32 "requested, on A100 80GB" and the doctor was silent.

def test_fp32_on_a_gpu_with_bf16_tensor_cores_is_a_warning(tmp_path):
    rep = _doctor(tmp_path, _tree(train={"precision": "fp32"}), "MM181", gpu="a100-80gb")
    (f,) = rep.findings
    assert f.severity == "warning" and f.where == "train.precision" and f.fix.startswith("train.precision=bf16")
    assert "19.5 TFLOP/s" in f.message and "312 TFLOP/s" in f.message and "(16x)" in f.message


def test_bf16_on_an_a100_and_fp32_on_a_t4_are_silent(tmp_path):
    assert _doctor(tmp_path, _tree(), "MM181", gpu="a100-80gb").findings == []
    # a T4 has no bf16: fp32 or fp16 (with its overflow risks, MM041) is the user's choice there
    assert _doctor(tmp_path, _tree(train={"precision": "fp32"}), "MM181", gpu="t4").findings == []
    # a run pinned to the CPU (recipes/demo_counting.yaml: fp32 on 2 cores) uses no GPU, whatever --gpu says
    assert _doctor(tmp_path, _tree(train={"precision": "fp32", "device": "cpu"}), "MM181", gpu="a100-80gb").findings == []


# https://github.com/huggingface/lerobot/issues/4180, https://github.com/ContextualAI/gritlm/issues/9: eager attention
# against SDPA in training (4.41 vs 3.54 GiB peak, slower steps); `model.attn_implementation=eager` was kept silently.

def test_eager_attention_where_the_model_has_sdpa_is_a_warning(tmp_path):
    rep = _doctor(tmp_path, _tree(model={"attn_implementation": "eager"}), "MM181", gpu="a100-80gb")
    (f,) = rep.findings
    assert f.severity == "warning" and f.where == "model.attn_implementation"
    assert "Qwen2VLForConditionalGeneration" in f.message and f.fix.startswith("model.attn_implementation=auto")
    assert _doctor(tmp_path, _tree(model={"attn_implementation": "sdpa"}), "MM181", gpu="a100-80gb").findings == []


def test_the_fast_path_check_is_not_run_without_a_target_gpu(tmp_path):
    rep = _doctor(tmp_path, _tree(train={"precision": "fp32"}, model={"attn_implementation": "eager"}), "MM181")
    assert rep.findings == [] and any(n[0] == "MM181" for n in rep.not_run)


# https://github.com/unslothai/unsloth/issues/1155 (batch 1, 2 and 4 at the same speed: "the padding of the large
# batches", fix group_by_length), https://github.com/tloen/alpaca-lora/pull/141, https://github.com/QData/TextAttack/
# issues/737: micro-batches of records of very different lengths are mostly padding. mmtune pads each micro-batch to
# its longest record (never to max_length), but grouping is off by default and nothing said what the padding cost.

def _varied(tmp_path, n: int = 32, long_every: int = 4) -> str:
    """`n` records: most answers a few tokens, every `long_every`-th one ~150 tokens."""
    rows = []
    for i in range(n):
        answer = " ".join(["seven"] * (150 if i % long_every == 0 else 2))
        rows.append({"messages": [{"role": "user", "content": f"Say it {i}."}, {"role": "assistant", "content": answer}]})
    path = tmp_path / "varied.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_micro_batches_that_are_mostly_padding_are_a_warning(tmp_path):
    data = _varied(tmp_path)
    tree = {**TEXT, "data": {"train": data, "max_length": 512}, "train": {"micro_batch_size": 4}}
    (f,) = run_codes(context_for(tmp_path, tree), "MM182").findings
    assert f.severity == "warning" and f.where == "data.group_by_length"
    assert f.fix.startswith("data.group_by_length=true")
    share = int(f.message.split("train: ")[1].split("%")[0])
    assert share >= 50, f.message  # most micro-batches hold one ~150-token record beside three short ones


def test_grouped_packed_or_single_record_batches_are_silent(tmp_path):
    data = _varied(tmp_path)
    base = {**TEXT, "data": {"train": data, "max_length": 512}}
    for data_keys, mb in (({"group_by_length": True}, 4), ({"packing": True}, 4), ({}, 1)):
        tree = {**base, "data": {**base["data"], **data_keys}, "train": {"micro_batch_size": mb}}
        assert run_codes(context_for(tmp_path, tree), "MM182").findings == [], (data_keys, mb)


def test_records_of_one_length_are_silent(tmp_path):
    data = _varied(tmp_path, long_every=10**6)  # record 0 alone is long: padding stays under a third
    data_uniform = tmp_path / "u.jsonl"
    data_uniform.write_text("".join(line for i, line in enumerate(open(data)) if i))
    tree = {**TEXT, "data": {"train": str(data_uniform), "max_length": 512}, "train": {"micro_batch_size": 4}}
    assert run_codes(context_for(tmp_path, tree), "MM182").findings == []


# https://github.com/DeepSpeedAI/DeepSpeedExamples/issues/849, https://github.com/QData/TextAttack/issues/737: padding
# every record to max_length. mmtune's collator pads a micro-batch to its longest record (pinned).

def test_the_collator_pads_to_the_micro_batchs_longest_record_not_max_length():
    import torch

    from mmtune.data.collate import Collator

    batch = Collator(pad_token_id=0)([{"input_ids": torch.ones(3, dtype=torch.long), "labels": torch.ones(3, dtype=torch.long)},
                                      {"input_ids": torch.ones(7, dtype=torch.long), "labels": torch.ones(7, dtype=torch.long)}])
    assert tuple(batch["input_ids"].shape) == (2, 7)
