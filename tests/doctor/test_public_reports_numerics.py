"""Broken setups from the sixth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 6: loss,
numerics and label masking"): what the loss and the labels do wrong, each rebuilt on a tiny Qwen2 saved to a folder
and then broken; the ones mmtune missed, caught now, and their clean twins left alone. Rows whose verdict is "a"
(impossible by construction) are pinned here too, with the real encoder or a real step.
"""

from __future__ import annotations

import json
import math

import pytest
import yaml

TEXT = [{"role": "user", "content": "How many circles are there?"}, {"role": "assistant", "content": "3"}]
SYSTEM = [{"role": "system", "content": "You are a helpful assistant."}, *TEXT]


def _folder(tmp_path, name="m", template=None):
    """A tiny Qwen2 folder as save_pretrained writes it; `template(text)` rewrites its chat_template.jinja."""
    from mmtune.models.tiny import build_tiny

    model, tok = build_tiny("tiny/qwen2")
    folder = tmp_path / name
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    if template is not None:
        path = folder / "chat_template.jinja"
        path.write_text(template(path.read_text()))
    return folder


def _data(tmp_path, records, name="train.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps({"messages": m}) + "\n" for m in records))
    return path


def _encoder(tmp_path, folder, **data):
    from doctor_helpers import context_for

    from mmtune.data.encode import Encoder

    tree = {"model": {"name": str(folder)}, "data": {"train": str(_data(tmp_path, [TEXT] * 4)), **data}}
    return Encoder.for_run(context_for(tmp_path, tree).need("resolved"))


def _train(tmp_path, folder, records, name="run", **train):
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train as run_train

    tree = {"model": {"name": str(folder)}, "data": {"train": str(_data(tmp_path, records, f"{name}.jsonl"))},
            "adapter": {"dropout": 0.0}, "output_dir": str(tmp_path / name), "logging": {"tensorboard": False},
            "train": {"max_steps": 2, "micro_batch_size": 2, "grad_accum": 1, "precision": "fp32", "device": "cpu",
                      "lr": 0.01, **train}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tree))
    run_train(build_run(load_config(path, [])))
    return [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]


# ----------------------------------------------------------------------------- "System role not supported"
# https://github.com/vllm-project/guidellm/issues/67, https://github.com/abetlen/llama-cpp-python/issues/1580,
# https://github.com/huggingface/chat-ui/issues/1386: Gemma's template raises "System role not supported". The doctor
# said so (MM062), but `mmtune train` stopped at the first record as an unreadable one ("reading the record raised
# TemplateError ... report it to mmtune ... or set data.on_bad_record=skip"), a skip that drops every record with a
# system turn, and all of them when data.system_prompt wrote it.

GEMMA_LIKE = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
              .__add__)


def test_system_turn_the_template_refuses_is_said_as_such(tmp_path):
    from mmtune.data.formats import BadRecord
    from mmtune.data.records import Record
    from mmtune.errors import ConfigError

    folder = _folder(tmp_path, template=GEMMA_LIKE)
    enc = _encoder(tmp_path, folder)
    record = Record("r7", "train.jsonl:8", SYSTEM)
    with pytest.raises(BadRecord) as e:
        enc.encode(record)
    assert e.value.reason == "system role not supported" and e.value.where == record.where()
    assert "System role not supported" in e.value.what and "merge the system text" in e.value.fix
    assert "report it to mmtune" not in e.value.fix
    with pytest.raises(ConfigError) as e:  # the config wrote the system turn: the config's error, said once
        _encoder(tmp_path, folder, system_prompt="Be brief.").encode(Record("r0", "x", TEXT))
    assert e.value.where == "data.system_prompt" and "remove data.system_prompt" in e.value.fix
    # clean twins: the same template without a system turn, and a template with a system role
    assert int((enc.encode(Record("r0", "x", TEXT))["labels"] != -100).sum()) == 2
    assert int((_encoder(tmp_path, _folder(tmp_path, "plain")).encode(record)["labels"] != -100).sum()) == 2


def test_a_template_that_fails_for_another_reason_stays_that_records_error(tmp_path):
    """Only a refusal caused by the system turn is renamed: a template that raises on the conversation anyway
    keeps the record boundary's own report."""
    from mmtune.data.formats import UNFORESEEN, BadRecord
    from mmtune.data.records import Record

    folder = _folder(tmp_path, template="{{ raise_exception('Conversation roles must alternate') }}".__add__)
    with pytest.raises(BadRecord) as e:
        _encoder(tmp_path, folder).encode(Record("r0", "x", SYSTEM))
    assert e.value.reason == UNFORESEEN and "alternate" in e.value.what


# ----------------------------------------------------------------------------- grad_norm nan beside a finite loss
# https://github.com/hiyouga/LlamaFactory/issues/7263 ("'loss': 0.000, 'grad_norm': nan"), https://github.com/
# modelscope/ms-swift/issues/2436, https://github.com/microsoft/GUI-Actor/issues/20: the gradient overflows while
# the loss does not. train.nan_guard looked at the loss only: the clipped update wrote NaN into the weights, the
# next step's loss was nan and its (innocent) records were blamed; a run that ended there saved the NaN adapter.
# Rebuilt with weights near fp32's limit (one lm_head row at 1e36: loss ~5e36, finite; its backward overflows).

def _overflowing_folder(tmp_path):
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    folder = _folder(tmp_path, "huge")
    weights = load_file(folder / "model.safetensors")
    row = AutoTokenizer.from_pretrained(folder).convert_tokens_to_ids("<|endoftext|>")
    weights["lm_head.weight"] = weights["lm_head.weight"].clone()
    weights["lm_head.weight"][row] = 1e36
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_nonfinite_gradient_beside_a_finite_loss_stops_before_the_update(tmp_path):
    from mmtune.errors import MMTuneError

    folder = _overflowing_folder(tmp_path)
    with pytest.raises(MMTuneError) as e:
        _train(tmp_path, folder, [TEXT] * 8)
    assert "gradient norm became nan at step 1" in e.value.what and "update was skipped" in e.value.what
    assert e.value.where.startswith("records [")
    # without the guard the step is skipped, not applied: the next steps' losses stay finite
    rows = _train(tmp_path, folder, [TEXT] * 8, name="unguarded", nan_guard=False)
    assert [r["skipped_update"] for r in rows] == [True, True]
    assert all(math.isfinite(r["loss"]) for r in rows)
    clean = _train(tmp_path, _folder(tmp_path), [TEXT] * 8, name="clean")  # clean twin: trains, nothing skipped
    assert [r["skipped_update"] for r in clean] == [False, False]
    assert all(math.isfinite(r["grad_norm"]) for r in clean)


# ----------------------------------------------------------------------------- pinned: accumulation normalises
# https://github.com/huggingface/transformers/pull/34191, https://github.com/huggingface/transformers/issues/37766,
# https://github.com/unslothai/unsloth-zoo/issues/6: a mean per micro-batch averaged over accumulation weighs short
# answers up. mmtune divides each step's token sum by the step's answer tokens: 2 x 1 and 1 x 2 give the same loss
# and the same update (the second step's loss, computed on the updated weights, agrees too).

def test_accumulation_gives_the_loss_and_update_of_one_big_batch(tmp_path):
    answers = ["3", "There are 4 squares in the image and 2 circles and 7 stars", "yes", "The answer is 12 and red"]
    records = [[TEXT[0], {"role": "assistant", "content": a}] for a in answers * 2]
    folder = _folder(tmp_path)
    big = _train(tmp_path, folder, records, name="big")
    acc = _train(tmp_path, folder, records, name="acc", micro_batch_size=1, grad_accum=2)
    for a, b in zip(big, acc):
        assert a["answer_tokens"] == b["answer_tokens"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6) and a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)


# ----------------------------------------------------------------------------- pinned: what the labels hold
# https://github.com/QwenLM/Qwen/issues/41, https://github.com/huggingface/trl/issues/1282 (prompt, system turn and
# earlier answers: which are trained?), https://github.com/huggingface/transformers/pull/30650 and
# https://github.com/huggingface/trl/pull/4201 (`{% generation %}` templates; assistant masks all zeros without
# them), https://github.com/InfiniTensor/InfiniLM/issues/388, https://github.com/LiveCodeBench/LiveCodeBench/pull/146
# (Llama 3: the template writes <|begin_of_text|> and the tokenizer adds another).

def _trained(enc, messages):
    from mmtune.data.records import Record

    out = enc.encode(Record("r0", "x", messages))
    return out, enc.tokenizer.convert_ids_to_tokens([int(i) for i in out["labels"] if i != -100])


def test_labels_hold_every_answer_and_its_turn_end_never_the_prompt(tmp_path):
    chat = [*SYSTEM, {"role": "user", "content": "How many squares are there?"}, {"role": "assistant", "content": "4"}]
    _, trained = _trained(_encoder(tmp_path, _folder(tmp_path)), chat)
    assert trained == ["3", "<|im_end|>", "4", "<|im_end|>"]
    generation = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['role'] == "
                  "'assistant' %}{% generation %}{{ message['content'] }}<|im_end|>{% endgeneration %}\n{% else %}"
                  "{{ message['content'] }}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
                  "<|im_start|>assistant\n{% endif %}")
    _, trained = _trained(_encoder(tmp_path, _folder(tmp_path, "gen", template=lambda _: generation)), chat)
    assert trained == ["3", "<|im_end|>", "4", "<|im_end|>"]


def test_bos_written_by_the_template_and_the_tokenizer_is_not_doubled(tmp_path):
    from mmtune.data.records import Record

    folder = _folder(tmp_path, "llama3", template="{{ bos_token }}".__add__)
    tok_json = json.loads((folder / "tokenizer.json").read_text())
    bos = next(t["id"] for t in tok_json["added_tokens"] if t["content"] == "<|endoftext|>")
    special = {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}
    tok_json["post_processor"] = {  # Llama 3's: "<|begin_of_text|> $A" on every encode with special tokens
        "type": "TemplateProcessing", "single": [special, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [special, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [bos], "tokens": ["<|endoftext|>"]}}}
    (folder / "tokenizer.json").write_text(json.dumps(tok_json))
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**cfg, "bos_token": "<|endoftext|>"}))
    enc = _encoder(tmp_path, folder)
    assert enc.tokenizer("x")["input_ids"][0] == bos  # the tokenizer does add it
    out, trained = _trained(enc, TEXT)
    ids = out["input_ids"].tolist()
    assert ids[0] == bos and ids.count(bos) == 1 and trained == ["3", "<|im_end|>"]
    prompt = enc.encode_prompt(Record("r0", "x", TEXT))["input_ids"].tolist()
    assert prompt[0] == bos and prompt.count(bos) == 1


# ----------------------------------------------------------------------------- pinned: eval loss is train's loss
# https://github.com/huggingface/transformers/issues/24839, https://github.com/huggingface/transformers/issues/39241,
# https://github.com/huggingface/transformers/issues/41898: eval_loss changes with the eval batch size (a mean of
# per-batch means). mmtune's eval_loss is the training loss's token sum over the whole set, divided once.

def test_eval_loss_is_the_token_mean_whatever_the_batch_size(tmp_path):
    import torch

    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.evaluate.run_eval import eval_loss_sums
    from mmtune.loss import loss_sum

    answers = ["3", "There are 4 squares in the image and 2 circles and 7 stars", "yes", "The answer is 12 and red"]
    records = [[TEXT[0], {"role": "assistant", "content": a}] for a in answers]
    tree = {"model": {"name": str(_folder(tmp_path))}, "data": {"train": str(_data(tmp_path, records))},
            "output_dir": str(tmp_path / "run"), "train": {"precision": "fp32", "device": "cpu"}}
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(tree))
    run = build_run(load_config(path, []))
    model, recs = run.unwrapped_model(), run.train_set.records
    sums = {b: eval_loss_sums(model, run.encoder, run.collator, recs, device="cpu", batch_size=b,
                              autocast=run.accelerator.autocast) for b in (1, 3)}
    (s1, n1), (s3, n3) = sums[1], sums[3]
    assert n1 == n3 and s1 / n1 == pytest.approx(s3 / n3, rel=1e-6)
    with torch.no_grad():  # one record at a time through the training loss: the same token sum
        singles = [loss_sum(model, run.collator([run.encoder.encode(r)])) for r in recs]
    assert sum(float(s) for s, _ in singles) == pytest.approx(s1, rel=1e-6)
