"""data.format=text (continued pretraining on raw text): a document is trained whole, with the tokenizer's BOS
convention and an EOS after it, no chat template, every token labelled; a long one is cut into windows that
train every token once; short ones pack apart; eval reports perplexity; a base model without a chat template
trains. Tiny Qwen2 (and its base twin without a template) and tiny Qwen2-VL on text, no downloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from mmtune.config.schema import DataConfig, RunConfig
from mmtune.data.encode import Encoder
from mmtune.data.formats import BadRecord
from mmtune.data.records import RecordSet
from mmtune.data.row_formats.text import document_record
from mmtune.data.sources import load_records
from mmtune.data.text_windows import spans, windowed
from mmtune.errors import ConfigError
from mmtune.models.tiny import tiny_config_and_processor

DOC = "The quick brown fox jumps over the lazy dog, and then it runs far away into the green hills. " * 4


def _encoder(name="tiny/qwen2", max_length=512, template=True, bos=False):
    _, proc = tiny_config_and_processor(name)
    tok = getattr(proc, "tokenizer", proc)
    if not template:
        proc.chat_template = tok.chat_template = None
    if bos:  # a Llama-style tokenizer: BOS added by the tokenizer itself
        from tokenizers.processors import TemplateProcessing

        tok.bos_token = "<|endoftext|>"
        tok.backend_tokenizer.post_processor = TemplateProcessing(
            single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", tok.convert_tokens_to_ids("<|endoftext|>"))])
    cfg = RunConfig.model_validate({"model": {"name": name}, "data": {"format": "text", "max_length": max_length}})
    return Encoder(proc, None, cfg)


@pytest.mark.parametrize("name", ["tiny/qwen2", "tiny/qwen2-vl"])
def test_a_document_is_its_tokens_and_an_eos_every_one_trained_no_template(name):
    enc = _encoder(name, template=False)  # the base twin: no chat template, nothing rendered by one
    out = enc.encode(document_record("d", "f:1", DOC))
    ids, labels = out["input_ids"], out["labels"]
    tok = enc.tokenizer
    plain = tok(DOC, add_special_tokens=False)["input_ids"]
    assert ids.tolist() == plain + [tok.eos_token_id]  # the text, then one EOS: no template token, no BOS here
    assert torch.equal(labels, ids)  # every token is an answer token
    assert "<|im_start|>" not in tok.decode(ids)
    assert enc.measure(document_record("d", "f:1", DOC))["total"] == ids.numel()
    if name == "tiny/qwen2-vl":  # a VLM's processor keys for a text-only record, none for media
        assert set(out) >= {"input_ids", "attention_mask", "labels"} and "pixel_values" not in out


def test_bos_as_the_tokenizer_applies_it_never_doubled_and_eos_not_doubled():
    enc = _encoder(bos=True)
    tok = enc.tokenizer
    bos, eos = tok.convert_tokens_to_ids("<|endoftext|>"), tok.eos_token_id
    ids = enc.encode(document_record("d", "f:1", "Hello there."))["input_ids"].tolist()
    assert ids[0] == bos and ids.count(bos) == 1 and ids[-1] == eos and ids.count(eos) == 1
    again = enc.encode(document_record("d", "f:1", "<|endoftext|>Hello there."))["input_ids"].tolist()
    assert again == ids  # a document that starts with BOS gets none added
    ended = enc.encode(document_record("d", "f:1", "Hello there.<|im_end|>"))["input_ids"].tolist()
    assert ended.count(eos) == 1


@pytest.mark.parametrize("n,length", [(5, 16), (16, 16), (17, 16), (40, 16), (31, 16), (1000, 9)])
def test_windows_predict_every_token_exactly_once(n, length):
    parts = spans(n, length)
    assert all(0 < b - a <= length for a, b in parts) and parts[0][0] == 0 and parts[-1][1] == n
    targets = [t for a, b in parts for t in range(a + 1, b)]  # position 0 of a window is never predicted
    assert targets == list(range(1, n))  # every token after the first, once, in order
    assert all(b - a >= 2 for a, b in parts) or n == 1


def test_a_long_document_becomes_windows_that_cover_it_counted_in_the_notes():
    enc = _encoder(max_length=32)
    long_doc, short = document_record("a", "f:1", DOC), document_record("b", "f:2", "Short one.")
    whole = enc.encode(long_doc, check_length=False)["input_ids"].tolist()
    rs = windowed(RecordSet(records=[long_doc, short]), enc, "error")
    wins = [r for r in rs.records if r.id.startswith("a/")]
    assert len(wins) == len(spans(len(whole), 32)) > 2 and len(rs.records) == len(wins) + 1
    got = [enc.encode(w)["input_ids"].tolist() for w in wins]
    assert all(len(g) <= 32 for g in got)
    assert got[0] + [t for g in got[1:] for t in g[1:]] == whole  # consecutive, one token of overlap, nothing lost
    assert all(enc.encode(w)["labels"].tolist() == g for w, g in zip(wins, got))
    assert rs.notes == [f"2 documents -> {len(wins) + 1} windows of at most 32 tokens (data.max_length): 1 longer "
                        "document(s) cut into consecutive windows, each after the first starting on the token before "
                        "it so that every token is trained once; none truncated"]
    with pytest.raises(BadRecord, match="not truncated") as e:  # an uncut long document is refused, never cut
        enc.encode(long_doc)
    assert e.value.reason == "too long"
    with pytest.raises(BadRecord):
        enc.encode(long_doc)


def test_packed_documents_give_the_unpacked_loss():
    from mmtune.data.collate import Collator
    from mmtune.data.packing import pack_row
    from mmtune.loss import loss_sum
    from mmtune.models.tiny import build_tiny

    torch.manual_seed(0)
    model, _ = build_tiny("tiny/qwen2")
    model = model.float().eval()
    enc = _encoder()
    items = [enc.encode(document_record(str(i), f"f:{i}", DOC[: 30 + 25 * i])) for i in range(3)]
    collate = Collator(enc.tokenizer.pad_token_id or 0)
    with torch.no_grad():
        loss0, n0 = loss_sum(model, collate(items))
        loss1, n1 = loss_sum(model, collate([pack_row(items)]))
    # each document is predicted from itself only: its first token not from the one before, the rest unchanged
    assert int(n0) == int(n1) == sum(len(it["input_ids"]) - 1 for it in items)
    assert abs(float(loss0) - float(loss1)) < 1e-4 * float(loss0)


def test_text_rows_txt_files_and_folders_are_documents(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps({"text": "one"}) + "\n" + json.dumps({"body": "two", "id": "x"}) + "\n")
    rs = load_records(str(f), DataConfig(format="text", on_bad_record="skip"))
    assert [r.answer_text() for r in rs] == ["one"] and rs.skipped == {"missing field": 1}
    rs = load_records(str(f), DataConfig(format="text", columns={"text": "body"}, on_bad_record="skip"))
    assert [(r.id, r.answer_text(), r.document) for r in rs] == [("x", "two", True)]
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "a.txt").write_text("first document\nwith two lines\n")
    (corpus / "sub" / "b.txt").write_text("second")
    rs = load_records(str(corpus), DataConfig(format="text"))
    assert [(r.id, r.answer_text()) for r in rs] == [("a.txt", "first document\nwith two lines\n"), ("sub/b.txt", "second")]
    assert [r.answer_text() for r in load_records(str(corpus / "a.txt"), DataConfig(format="text"))] == [
        "first document\nwith two lines\n"]


def test_format_defaults_turn_generation_off_and_the_base_model_needs_no_template():
    from mmtune.config.format_defaults import with_format_defaults
    from mmtune.config.loader import validate
    from mmtune.data.documents import require_chat_template

    cfg = validate(with_format_defaults({"model": {"name": "tiny/qwen2"}, "data": {"format": "text"}}, {}))
    assert cfg.eval.generate is False and cfg.eval.metrics == []
    kept = validate(with_format_defaults({"model": {"name": "tiny/qwen2"}, "data": {"format": "text"},
                                          "eval": {"metrics": ["exact_match"]}}, {}))
    assert kept.eval.metrics == ["exact_match"]  # a value the config sets is kept
    enc = _encoder(template=False)
    require_chat_template(enc.processor, cfg)  # raw text: no template needed
    with pytest.raises(ConfigError, match="no chat template"):
        require_chat_template(enc.processor, RunConfig.model_validate({"model": {"name": "tiny/qwen2"}}))


def _base_model_folder(tmp_path: Path) -> Path:
    """tiny/qwen2 as a base model's folder: config and tokenizer, no chat template (weights random)."""
    config, tok = tiny_config_and_processor("tiny/qwen2")
    tok.chat_template = None
    folder = tmp_path / "base"
    config.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _config(tmp_path, model, data, **extra) -> Path:
    tree = {"output_dir": str(tmp_path / "run"), "model": {"name": str(model), "weights": "random",
                                                             "gradient_checkpointing": False},
            "data": {"format": "text", "max_length": 48, **data}, "adapter": {"method": "lora", "r": 4},
            "train": {"max_steps": 2, "micro_batch_size": 2, "precision": "fp32", "device": "cpu", "seed": 0},
            "eval": {"every": 2, "batch_size": 2}, "logging": {"tensorboard": False}, **extra}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _corpus(tmp_path) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(4):
        (corpus / f"d{i}.txt").write_text(f"Document {i}. " + "Cats and dogs play in the garden. " * (1 + 4 * i))
    return corpus


def test_two_steps_on_a_txt_folder_with_a_base_model(tmp_path):
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    corpus = _corpus(tmp_path)
    cfg = load_config(_config(tmp_path, _base_model_folder(tmp_path), {"train": str(corpus), "eval": str(corpus)}), [])
    run = build_run(cfg)
    n = len(run.train_set.records)
    assert n > 4 and any(d.startswith(f"data.train: 4 documents -> {n} windows") for d in run.decisions)
    train(run)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["eval"]["eval_perplexity"] == pytest.approx(
        2.718281828 ** summary["eval"]["eval_loss"], rel=1e-6)


def test_two_steps_on_jsonl_packed(tmp_path):
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    f = tmp_path / "docs.jsonl"
    f.write_text("".join(json.dumps({"text": f"Doc {i}. " + "word " * (3 * i)}) + "\n" for i in range(10)))
    cfg = load_config(_config(tmp_path, "tiny/qwen2", {"train": str(f), "packing": True}, eval={"every": None}), [])
    run = build_run(cfg)
    train(run)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 2


def test_data_inspect_and_the_planner_count_windows(tmp_path):
    from mmtune.config import load_config
    from mmtune.data.inspect import inspect_data
    from mmtune.plan.batch import worst_case_batch
    from mmtune.resolve.run import resolve_run
    from mmtune.resolve.target import local_target

    corpus = _corpus(tmp_path)
    cfg = load_config(_config(tmp_path, _base_model_folder(tmp_path), {"train": str(corpus)}), [])
    resolved = resolve_run(cfg, local_target("cpu"))
    report = inspect_data(resolved)
    (note,) = [x for x in report["notes"] if "documents ->" in x]
    assert note.startswith(f"4 documents -> {report['ok']} windows") and report["ok"] > 4
    assert report["tokens"]["total"]["max"] == 48  # the longest window, at data.max_length: cut, not refused
    batch = worst_case_batch(resolved)  # the planner's batch: the longest window, measured as text tokens
    assert batch.records_seen == report["ok"] and batch.tokens == max(batch.lengths) == 48


@pytest.mark.parametrize("fmt,fires", [("text", False), ("messages", True)])
def test_mm030_does_not_fire_for_raw_text_on_a_base_model(tmp_path, fmt, fires):
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "doctor"))
    from doctor_helpers import context_for, run_codes

    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps({"text": "A document."}) + "\n")
    tree = {"model": {"name": str(_base_model_folder(tmp_path)), "weights": "random"},
            "data": {"train": str(f), "format": fmt, "max_length": 64}, "train": {"max_steps": 2}}
    report = run_codes(context_for(tmp_path, tree), "MM030")
    assert any(x.code == "MM030" and x.severity == "error" for x in report.findings) == fires, report.findings


def test_epochs_count_the_windows_not_the_documents(tmp_path):
    """train.epochs=1 on documents cut into windows is one pass over every window: resolve_run counted the 4
    documents (no tokenizer yet); the build recounts with the windows and puts the steps and warmup in force, said
    in the start-up summary and the resolved run."""
    from mmtune.build import build_run
    from mmtune.config import load_config

    corpus = _corpus(tmp_path)
    cfg = load_config(_config(tmp_path, "tiny/qwen2", {"train": str(corpus)}, eval={"every": None}),
                      ["train.max_steps=null", "train.epochs=1", "train.warmup_ratio=0.5"])
    run = build_run(cfg)
    n = len(run.train_set.records)
    assert n > 4
    steps = n // 2  # micro-batch 2, grad_accum 1, one process
    assert run.cfg.train.max_steps == steps and run.resolved.cfg.train.max_steps == steps
    assert run.cfg.train.warmup_steps == round(0.5 * steps)
    line = next(d for d in run.decisions if d.startswith("train.max_steps:"))
    assert line.startswith(f"train.max_steps: {steps} (train.epochs=1: an epoch of {n} windows")
    assert sum(d.startswith("train.max_steps:") for d in run.decisions) == 1


def test_a_stream_cuts_documents_into_windows_and_resumes_mid_document(tmp_path):
    """data.streaming deals a long document's windows one after another, as in memory (before: the start-up check
    cut its sample and passed, then the loop refused the same document as "too long"); a position taken between
    two windows of one document continues at the next window."""
    from mmtune.data.streaming import RecordStream

    f = tmp_path / "docs.jsonl"
    f.write_text("".join(json.dumps({"text": f"Doc {i}. " + DOC * (i % 3)}) + "\n" for i in range(6)))
    enc = _encoder(max_length=48)
    cfg = DataConfig(train=str(f), format="text", max_length=48, streaming=True, shuffle_buffer=1)
    in_memory = windowed(load_records(str(f), cfg), enc, "error").records
    assert len(in_memory) > 6

    def texts(stream, n):
        return [[r.tokens.tolist() for r in stream.next_records()] for _ in range(n)]

    stream = RecordStream(str(f), cfg, seed=0, micro_batch_size=1, encoder=enc)
    got = texts(stream, len(in_memory))
    assert [t for (t,) in got] == [r.tokens.tolist() for r in in_memory]  # shuffle_buffer=1: the file's order
    assert all(len(t) <= 48 for (t,) in got)
    a = RecordStream(str(f), cfg, seed=0, micro_batch_size=1, encoder=enc)
    texts(a, 3)
    pos = a.position()
    assert 0 < pos["taken"] < len(windowed(load_records(str(f), cfg), enc, "error").records)
    b = RecordStream(str(f), cfg, seed=0, micro_batch_size=1, encoder=enc, position=pos)
    assert texts(b, 4) == texts(a, 4)


def test_streamed_continued_pretraining_trains_documents_longer_than_max_length(tmp_path):
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    corpus = _corpus(tmp_path)  # documents of ~11 to ~110 tokens, data.max_length 48
    cfg = load_config(_config(tmp_path, "tiny/qwen2", {"train": str(corpus), "streaming": True, "shuffle_buffer": 2},
                              eval={"every": None}), ["train.max_steps=4"])
    summary = train(build_run(cfg))
    assert summary["train_records"] == 8
    out = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert out["steps"] == 4 and not out.get("skipped")
