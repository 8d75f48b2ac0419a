"""Broken setups from the thirty-eighth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 38:
continued pretraining and completion-style data on base models"): raw-text corpora (a `text` field, .txt files),
other tools' switches for the loss on the prompt, documents longer than the sequence cap, completion-style records.
Rebuilt on the tiny Qwen2 twin; the misses are fixed (a raw row and a .txt corpus refused with a fix that cannot
work or with no reason, the prompt-loss switches answered with a near wrong key), the rest pinned.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from doctor_helpers import context_for, run_codes  # noqa: E402

from mmtune.config.schema import DataConfig  # noqa: E402
from mmtune.data.sources import load_records  # noqa: E402
from mmtune.errors import ConfigError, DataError  # noqa: E402

BASE = {"model": {"name": "tiny/qwen2"}, "data": {"train": "synthetic:counting", "max_length": 128},
        "train": {"max_steps": 2}}
DOCS = ["The cat sat on the mat. It was a sunny day and the cat was happy.",
        "Water boils at 100 degrees Celsius at sea level."]


def _jsonl(tmp_path, rows, name="d.jsonl") -> Path:
    f = tmp_path / name
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


# ----------------------------------------------------------------------------- a raw `text` row
# https://github.com/huggingface/trl/issues/1657, https://github.com/huggingface/trl/issues/915,
# https://github.com/unslothai/unsloth/issues/683, https://github.com/hiyouga/LlamaFactory/issues/5599: a
# continued-pretraining corpus of {"text": document} rows (TRL's dataset_text_field, LLaMA-Factory's stage pt).
# mmtune refused each row as "missing field" with the fix data.columns.messages=<field>: mapping `text` there
# fails again one step later (a string is not a list of turns). Under another format such a row is refused with
# data.format=text, which trains it (docs/data.md "Raw text").
def test_a_raw_text_row_is_refused_as_raw_text_with_a_fix_that_works(tmp_path):
    chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    f = _jsonl(tmp_path, [{"text": d} for d in DOCS] + [chat])
    rs = load_records(str(f), DataConfig(on_bad_record="skip"))
    assert len(rs) == 1 and rs.skipped == {"missing field": 2}, rs.problems
    where, what = rs.problems[0]
    assert where == f"{f}:1" and "raw 'text' document, not a conversation" in what
    with pytest.raises(DataError) as e:
        load_records(str(f), DataConfig())
    assert "data.format=text" in e.value.fix and "data.columns.messages" not in e.value.fix
    # the fix, followed, loads the documents (the chat row is no document: counted)
    rs = load_records(str(f), DataConfig(format="text", on_bad_record="skip"))
    assert [r.answer_text() for r in rs] == DOCS and all(r.document for r in rs) and rs.skipped == {"missing field": 1}
    # a row whose `text` is mapped on purpose keeps the generic answer (the mapping is the user's)
    with pytest.raises(DataError) as e:
        load_records(str(f), DataConfig(columns={"messages": "body"}))
    assert "data.columns" in e.value.fix


def test_the_doctor_says_it_at_mm014(tmp_path):
    f = _jsonl(tmp_path, [{"text": d} for d in DOCS])
    report = run_codes(context_for(tmp_path, {**BASE, "data": {"train": str(f), "max_length": 128}}), "MM014")
    (finding,) = [x for x in report.findings if x.code == "MM014"]
    assert "raw 'text' document" in finding.message and "data.format=text" in finding.fix


# ----------------------------------------------------------------------------- a .txt corpus
# https://github.com/huggingface/trl/issues/915 (load_dataset("text", data_files="to-train.txt")),
# https://github.com/ai-forever/ru-gpts/issues/30: a plain text file. mmtune said "unknown file type '.txt'" and
# listed the suffixes it reads. A .txt file is now one document of data.format=text; other text suffixes say so.
def test_a_txt_corpus_says_what_it_is_and_what_to_write(tmp_path):
    from mmtune.data.local_readers import reader_for

    f = tmp_path / "corpus.txt"
    f.write_text("\n".join(DOCS) + "\n")
    (rec,) = load_records(str(f), DataConfig(format="text")).records
    assert rec.document and rec.answer_text() == "\n".join(DOCS) + "\n"
    md = tmp_path / "corpus.md"
    md.write_text(DOCS[0])
    with pytest.raises(DataError) as e:
        reader_for(md)
    assert "unknown file type '.md'" in e.value.what and "data.format=text" in e.value.fix
    g = tmp_path / "table.tsv"  # another unknown suffix: the list of readers only
    g.write_text("a\tb\n")
    with pytest.raises(DataError) as e:
        reader_for(g)
    assert "data.format=text" not in e.value.fix


# ----------------------------------------------------------------------------- the loss on the prompt
# https://github.com/tloen/alpaca-lora/issues/255, https://github.com/tloen/alpaca-lora/issues/499 (train_on_inputs),
# https://github.com/hiyouga/LlamaFactory/issues/1184 (train_on_prompt), https://github.com/huggingface/open-r1/issues/648,
# https://github.com/huggingface/alignment-handbook/issues/56 (completion_only_loss / assistant_only_loss): a config
# carried over with the switch. difflib's nearest key answered train_on_inputs with train.save_every_minutes,
# train_on_prompt with train.loss_impl and mask_prompt with data.system_prompt: wrong keys; the command line
# (`--train_on_inputs false`) did so even for keys the YAML path already answered (`--template` -> temperature).
@pytest.mark.parametrize("key,wrong", [("train_on_inputs", "save_every_minutes"), ("train_on_prompt", "loss_impl"),
                                       ("mask_prompt", "system_prompt"), ("completion_only_loss", ""),
                                       ("assistant_only_loss", ""), ("dataset_text_field", "")])
def test_prompt_loss_switches_of_other_tools_are_answered_not_guessed(tmp_path, key, wrong):
    from mmtune.config.loader import load_config, split_overrides

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE, key: True, "output_dir": str(tmp_path / "run")}))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    (said,) = [f"{p['message']} -> {p['fix']}" for p in e.value.problems if p["key"] == key]
    assert "did you mean" not in said and (not wrong or wrong not in said), said
    assert ("answers only" in said) if key != "dataset_text_field" else ("data.format=text" in said)
    with pytest.raises(ConfigError) as e:
        split_overrides([f"--{key}", "false", "--template", "qwen"])
    what = " ".join(str(e.value).split())
    assert f"--{key} false -> drop it" in what and "temperature" not in what, what
    assert "save_every_minutes" not in e.value.fix and "=false" not in e.value.fix


# ----------------------------------------------------------------------------- completion-style records (pins)
# https://github.com/huggingface/trl/issues/1623, https://github.com/hiyouga/LlamaFactory/issues/2004,
# https://github.com/Lightning-AI/lit-llama/issues/329: no EOS after each text, so the model never learns to stop;
# https://github.com/hiyouga/LlamaFactory/issues/3145, https://github.com/hiyouga/LlamaFactory/issues/4657,
# https://github.com/hiyouga/LlamaFactory/issues/5702: a document past cutoff_len cut (or chunked) silently.
def test_a_completion_is_trained_to_its_turn_end_and_a_long_one_is_refused_not_cut(tmp_path):
    from mmtune.data.encode import Encoder

    rows = [{"prompt": d[:12], "completion": d[12:]} for d in DOCS]
    rows.append({"prompt": "Once", "completion": " upon a time" * 60})  # ~180 tokens, data.max_length=128
    f = _jsonl(tmp_path, rows)
    ctx = context_for(tmp_path, {**BASE, "data": {"train": str(f), "max_length": 128}})
    enc = Encoder.for_run(ctx.need("resolved"))
    rs = load_records(str(f), DataConfig())
    out = enc.encode(rs[0])
    ids, labels = out["input_ids"].reshape(-1), out["labels"].reshape(-1)
    trained = enc.tokenizer.decode(ids[labels != -100])
    assert trained == DOCS[0][12:] + "<|im_end|>", trained  # the whole completion, and the stop after it
    assert DOCS[0][:12] not in trained  # the prompt is context
    report = run_codes(ctx, "MM017")
    (finding,) = [x for x in report.findings if x.code == "MM017" and x.severity == "error"]
    assert finding.where.startswith(f"{f}:3") and "never truncates" in finding.message, finding
    assert "data.max_length=" in finding.fix  # the length that fits, or skip: never a silent cut or chunking


# ----------------------------------------------------------------------------- LLaMA-Factory's pretraining entry
# https://github.com/hiyouga/LlamaFactory/issues/5599, https://github.com/hiyouga/LlamaFactory/issues/7508: a corpus
# registered as LLaMA-Factory registers its own c4_demo for stage pt, `"columns": {"prompt": "text"}`. mmtune read
# it as alpaca SFT data and refused every row with the fix "set columns.response in the entry to the field that
# holds it": followed with `text`, each document would train as the answer to itself. Its rows are now documents
# (data.format=text); `stage: pt` itself is answered with data.format=text.
def test_a_prompt_only_registry_entry_is_named_a_pretraining_corpus(tmp_path):
    _jsonl(tmp_path, [{"text": d} for d in DOCS], "c4_demo.jsonl")
    (tmp_path / "dataset_info.json").write_text(json.dumps({
        "c4_demo": {"file_name": "c4_demo.jsonl", "columns": {"prompt": "text"}},
        "qa": {"file_name": "qa.jsonl", "columns": {"prompt": "question"}}}))
    rs = load_records("c4_demo", DataConfig(dataset_info=str(tmp_path)))
    assert [r.answer_text() for r in rs] == DOCS and all(r.document for r in rs)
    # an SFT entry naming its prompt column, whose rows have the default answer column, trains as before
    _jsonl(tmp_path, [{"question": "2+2?", "output": "4"}], "qa.jsonl")
    (rec,) = load_records("qa", DataConfig(dataset_info=str(tmp_path))).records
    assert [m["role"] for m in rec.messages] == ["user", "assistant"] and rec.answer_text() == "4"


@pytest.mark.parametrize("value,ours", [("pt", "data.format=text"), ("sft", "train.objective")])
def test_stage_pt_is_answered_with_data_format_text(tmp_path, value, ours):
    from mmtune.config.loader import load_config, split_overrides

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE, "stage": value, "output_dir": str(tmp_path / "run")}))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    (fix,) = [p["fix"] for p in e.value.problems if p["key"] == "stage"]
    assert f"did you mean {ours}" in fix.replace("'", ""), fix
    with pytest.raises(ConfigError) as e:
        split_overrides(["--stage", value])
    assert (f"--stage {value} -> data.format=text" in str(e.value)) == (value == "pt"), str(e.value)
