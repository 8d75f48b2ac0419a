"""Public bug reports, batch 39 (docs/doctor.md, "Public bug reports, batch 39: Qwen3 / Qwen3-VL thinking mode and
reasoning data"): reasoning traces in SFT data and thinking models at evaluation. Each test rebuilds the report's
records on a tiny Qwen2 folder whose chat template is Qwen3-8B's real one (tests/data/fixtures), its Thinking-2507
form (the generation prompt opens `<think>`) or DeepSeek-R1-Distill's `</think>` split, and checks what is trained,
what the doctor says or how evaluation scores; the misses fixed here fail without their fix, the rest pin what
mmtune already does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from doctor_helpers import context_for, run_codes
from test_public_reports_conversations import _data  # rows -> a JSONL file

from mmtune.config.schema import DataConfig
from mmtune.data.sources import load_records

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixtures"
QWEN3 = (FIXTURES / "qwen3_chat_template.jinja").read_text()
# Qwen3-4B-Thinking-2507's / Qwen3-VL-*-Thinking's change to it: the generation prompt opens the reasoning itself.
QWEN3_THINKING = QWEN3.replace("{{- '<|im_start|>assistant\\n' }}", "{{- '<|im_start|>assistant\\n<think>\\n' }}")
# DeepSeek-R1-Distill-Qwen's rule (its tokenizer_config.json), in Qwen's turn tokens: every answer, the last one
# included, is written without what comes before its `</think>`; the generation prompt opens `<think>\n`.
R1_DISTILL = (
    "{%- for message in messages %}{%- if message['role'] == 'user' %}"
    "{{'<|im_start|>user\\n' + message['content'] + '<|im_end|>\\n'}}"
    "{%- elif message['role'] == 'assistant' %}{% set content = message['content'] %}"
    "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{'<|im_start|>assistant\\n' + content + '<|im_end|>\\n'}}{%- endif %}{%- endfor -%}"
    "{% if add_generation_prompt %}{{'<|im_start|>assistant\\n<think>\\n'}}{% endif %}")

U = lambda text: {"role": "user", "content": text}  # noqa: E731 - one-line message builders
A = lambda text: {"role": "assistant", "content": text}  # noqa: E731


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A tiny Qwen2 saved as save_pretrained writes it, with each template above as its chat_template.jinja."""
    from mmtune.models.tiny import build_tiny

    model, tok = build_tiny("tiny/qwen2")
    root, out = tmp_path_factory.mktemp("folders"), {}
    assert QWEN3_THINKING != QWEN3
    for name, template in (("qwen3", QWEN3), ("thinking", QWEN3_THINKING), ("r1", R1_DISTILL)):
        folder = out[name] = root / name
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        (folder / "chat_template.jinja").write_text(template)
    return out




def _tree(tmp_path, folder, rows, **data):
    return {"model": {"name": str(folder)}, "data": {"train": str(_data(tmp_path, rows)), **data}}


def _encoder(tmp_path, folder):
    from mmtune.data.encode import Encoder

    return Encoder.for_run(context_for(tmp_path, _tree(tmp_path, folder, [{"messages": [U("q"), A("1")]}])).need("resolved"))


def _trained(enc, record) -> str:
    out = enc.encode(record)
    return enc.tokenizer.decode(out["input_ids"].reshape(-1)[out["labels"].reshape(-1) != -100])


# ----------------------------------------------------------------------------- reasoning in a field of its own
# https://github.com/hiyouga/LlamaFactory/issues/7027 (R1 SFT on Chinese-DeepSeek-R1-Distill-data-110k, whose rows
# keep the trace in `reasoning_content`), https://github.com/huggingface/trl/pull/6766 (TRL splits `reasoning_content`
# out of R1-Distill turns), https://github.com/vllm-project/vllm/issues/19839 (served Qwen3 answers carry it). Qwen3's
# template reads `message.reasoning_content`; mmtune's message reader kept role and content only: the trace was
# dropped without a word and the bare answer trained after the empty think block.

def test_reasoning_in_its_own_field_is_trained_as_the_think_block(tmp_path, folders):
    rows = [{"messages": [U("How many circles?"), {"role": "assistant", "content": "3", "reasoning_content": "one, two, three"}]},
            {"conversations": [{"from": "human", "value": "And squares?"},
                               {"from": "gpt", "value": "4", "reasoning": "four corners"}]},
            {"messages": [U("Stars?"), {"role": "assistant", "content": "5", "reasoning_content": None}]},  # DeepSeek's null
            {"messages": [U("q"), {"role": "assistant", "content": "5", "reasoning": "a", "thinking": "b"}]},
            {"messages": [U("q"), {"role": "assistant", "content": "<think>\na\n</think>\n\n5", "reasoning_content": "a"}]}]
    rs = load_records(str(_data(tmp_path, rows)), DataConfig(on_bad_record="skip"))
    assert rs.skipped == {"bad conversation": 2} and len(rs) == 3, rs.problems
    assert "two different reasonings" in rs.problems[0][1] and "reasoning twice" in rs.problems[1][1]
    enc = _encoder(tmp_path / "enc", folders["qwen3"])
    assert _trained(enc, rs[0]) == "<think>\none, two, three\n</think>\n\n3<|im_end|>"
    assert _trained(enc, rs[1]) == "<think>\nfour corners\n</think>\n\n4<|im_end|>"
    assert _trained(enc, rs[2]) == "5<|im_end|>"  # no reasoning: the template's empty block stays prompt (MM072)


# ----------------------------------------------------------------------------- think blocks the template re-spaces
# https://github.com/modelscope/ms-swift/issues/4809, https://github.com/modelscope/ms-swift/issues/4810 (data written
# `<think></think>answer`), https://github.com/QwenLM/Qwen3/issues/1438 (`<think>\n  thinking  \n</think>\n answer`).
# Qwen3's template writes every last answer back as `<think>\n{r}\n</think>\n\n{answer}`: the record's text is not in
# the rendering, and mmtune refused the record with "no answer text the template renders ... give every assistant
# turn a non-empty text answer" (it is not empty).

@pytest.mark.parametrize("written, rendered", [
    ("<think></think>3", "<think>\n\n</think>\n\n3"),
    ("<think>\n  count them  \n</think>\n 3", "<think>\n  count them  \n</think>\n\n 3"),
    ("<think>\ncount them\n</think>\n\n3", "<think>\ncount them\n</think>\n\n3"),  # the template's own layout: as before
], ids=["no-newlines", "other-spaces", "as-rendered"])
def test_a_think_block_written_with_other_whitespace_is_trained_as_the_template_writes_it(tmp_path, folders, written, rendered):
    from mmtune.data.records import Record

    enc = _encoder(tmp_path, folders["qwen3"])
    record = Record("r0", "x", [U("How many circles?"), A(written)])
    assert _trained(enc, record) == rendered + "<|im_end|>"
    assert enc.rendered(record).endswith("<|im_start|>assistant\n" + rendered + "<|im_end|>\n")


def test_an_answer_with_two_think_blocks_is_refused_as_losing_reasoning(tmp_path, folders):
    """Beyond whitespace: Qwen3's template keeps the first block's reasoning and the text after the last `</think>`
    of `<think>a</think>b<think>c</think>3`, so `b<think>c` would be lost: refused, saying so."""
    from mmtune.data.formats import BadRecord
    from mmtune.data.records import Record

    enc = _encoder(tmp_path, folders["qwen3"])
    with pytest.raises(BadRecord, match="drops assistant turn 1's <think> reasoning"):
        enc.encode(Record("r0", "x", [U("q"), A("<think>a</think>b<think>c</think>3")]))


# ----------------------------------------------------------------------------- a template that drops the reasoning
# https://github.com/deepseek-ai/DeepSeek-R1/issues/633 ("the chat template deletes the text between <think></think>
# in training"), https://github.com/huggingface/trl/pull/6766 (TRL ships a training template that stops splitting on
# `</think>`), https://github.com/huggingface/trl/issues/2919. mmtune refused such records as "no answer text the
# template renders ... give every assistant turn a non-empty text answer"; now the reason and the template step to
# remove, counted under MM014 by the doctor; the same data without reasoning trains.

def test_a_template_that_drops_the_last_answers_reasoning_refuses_the_record_saying_so(tmp_path, folders):
    from mmtune.data.formats import BadRecord
    from mmtune.data.records import Record

    enc = _encoder(tmp_path / "enc", folders["r1"])
    with pytest.raises(BadRecord, match="drops assistant turn 1's <think> reasoning") as err:
        enc.encode(Record("r0", "x", [U("How many circles?"), A("<think>\ncount them\n</think>\n\n3")]))
    assert "content.split('</think>')" in err.value.fix
    assert _trained(enc, Record("r1", "x", [U("How many circles?"), A("3")])) == "3<|im_end|>"
    # an empty block the template leaves out loses nothing: the answer trains as rendered
    assert _trained(enc, Record("r2", "x", [U("How many circles?"), A("<think></think>3")])) == "3<|im_end|>"
    rows = [{"messages": [U("How many circles?"), A("<think>\ncount them\n</think>\n\n3")]}] * 2
    codes = run_codes(context_for(tmp_path / "doc", _tree(tmp_path / "doc", folders["r1"], rows)), "MM014")
    assert any("reasoning dropped" in f.message or "drops assistant turn" in f.message for f in codes.findings), codes.findings


# ----------------------------------------------------------------------------- evaluation cut mid-thought
# https://github.com/EleutherAI/lm-evaluation-harness/issues/3382 (a generation cut before `</think>`: the unfinished
# reasoning was scored as the response), https://github.com/THUDM/LongBench/issues/113 (R1 still thinking at the
# 128-token limit). mmtune scored such text as it stood: mae parsed the reasoning's first number, f1 matched its words.

def test_a_reasoning_block_cut_mid_thought_scores_as_no_answer():
    from mmtune.evaluate import metrics as M

    preds = ["<think>\nthere are 3 circles and", "<think>\n3\n</think>\n\n3"]
    out = M.compute(["mae", "exact_match", "f1"], preds, [["3"], ["3"]])
    # the cut one is no answer (an answer of 0 for mae, counted unparsable), not "3" read out of its reasoning
    assert out["unparsable"] == 1.0 and out["mae"] == 1.5 and out["exact_match"] == 0.5 and out["f1"] == 0.5
    assert M.final_answer("<think>\nthere are 3") == "" and M.final_answer("3") == "3"


def test_mm036_counts_the_reasoning_a_thinking_answer_must_generate(tmp_path, folders):
    """References written with their reasoning are counted whole against eval.max_new_tokens (pinned: MM036); left
    unset, the budget decided from the same answers covers the reasoning (resolve/generation_budget.py)."""
    trace = "<think>\n" + " ".join(["count the circles one by one"] * 8) + "\n</think>\n\n3"
    rows = [{"messages": [U("How many circles?"), A(trace)]}] * 2
    tree = _tree(tmp_path / "set", folders["qwen3"], rows)
    tree["data"]["eval"] = tree["data"]["train"]
    tree.setdefault("eval", {})["max_new_tokens"] = 16
    (f,) = run_codes(context_for(tmp_path / "set", tree), "MM036").findings
    assert f.severity == "warning" and "eval.max_new_tokens=" in f.fix
    del tree["eval"]["max_new_tokens"]
    assert run_codes(context_for(tmp_path / "set", tree), "MM036").findings == []


# ----------------------------------------------------------------------------- Thinking templates, data without reasoning
# https://github.com/modelscope/ms-swift/issues/5927 (Qwen3-4B-Thinking-2507 trained on `<think>\n\n</think>\n\n...`
# answers `<think>\nResults ...`, the block never closed), https://github.com/hiyouga/LlamaFactory/pull/10201 (the
# Qwen3-VL thinking example trains an empty block), https://github.com/hiyouga/LlamaFactory/issues/7905. The
# Thinking template's generation prompt opens `<think>\n`, which an answer without reasoning does not follow:
# MM072 (batch "checked", read from the template's own rendering) warns, its fix naming the reasoning block (pinned).

def test_mm072_warns_a_thinking_template_trained_on_answers_without_reasoning(tmp_path, folders):
    plain = [{"messages": [U("How many circles?"), A("3")]}] * 2
    (f,) = run_codes(context_for(tmp_path / "a", _tree(tmp_path / "a", folders["thinking"], plain)), "MM072").findings
    assert f.severity == "warning" and "generation prompt" in f.message and "thinking model" in f.fix


# ----------------------------------------------------------------------------- max_length through a long trace
# https://github.com/hiyouga/LlamaFactory/issues/9218 (labels of a Qwen3 think record), https://github.com/modelscope/
# ms-swift/issues/5793 (max_length 32768 reasoning SFT): a trace longer than the length limit loses its answer when
# cut from the right. mmtune never truncates: the record is refused naming the length that fits (pinned: MM017).

def test_a_trace_longer_than_max_length_is_refused_not_cut(tmp_path, folders):
    trace = "<think>\n" + " ".join(["count the circles one by one"] * 40) + "\n</think>\n\n3"
    rs = load_records(str(_data(tmp_path, [{"messages": [U("How many circles?"), A(trace)]}])), DataConfig(max_length=64))
    from mmtune.data.formats import BadRecord

    enc = _encoder(tmp_path / "enc", folders["qwen3"])
    enc.max_length = 64
    with pytest.raises(BadRecord, match="data.max_length=64"):
        enc.encode(rs[0])
