"""Public bug reports, batch 18 (docs/doctor.md, "Public bug reports, batch 18: multi-turn, system prompts and
tool-calling data"): conversations beyond one question and one answer. Each test rebuilds the report's record on a
tiny Qwen2 folder whose chat template is rewritten to the family's (Qwen3's history rule, Qwen2's default system
turn) or on the tiny Qwen2-VL, and checks what is trained, what the prompt holds, or that the record is refused with
its reason; the misses fixed here fail without their fix, the rest pin what mmtune already does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doctor_helpers import TINY_VL, context_for, run_codes
from PIL import Image

from mmtune.config.schema import DataConfig
from mmtune.data.records import Record
from mmtune.data.sources import load_records

# Qwen3's rule, as its chat template writes it: an answer before the last user query loses its <think> block (and
# the empty one a last answer gets); the answers after it keep theirs.
QWEN3_LIKE = (
    "{%- set ns = namespace(looking=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}{%- if ns.looking and message.role == 'user' %}{%- set ns.looking = false %}"
    "{%- set ns.last_query_index = (messages|length - 1) - loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for message in messages %}{%- set content = message.content %}"
    "{%- if message.role != 'assistant' %}{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- else %}{%- set reasoning = '' %}"
    "{%- if '</think>' in content %}{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1]"
    ".lstrip('\\n') %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning) %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# Qwen2's / Qwen2-VL's: "You are a helpful assistant." when the conversation brings no system turn.
QWEN2_DEFAULT_SYSTEM = ("{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant."
                        "<|im_end|>\n{% endif %}")

U = lambda text: {"role": "user", "content": text}  # noqa: E731 - one-line message builders
A = lambda text: {"role": "assistant", "content": text}  # noqa: E731
TWO_TURNS = [U("How many circles?"), A("<think>\ncount them\n</think>\n\n3"), U("And squares?"),
             A("<think>\nfour of them\n</think>\n\n4")]
PLAIN_TWO_TURNS = [U("How many circles?"), A("3"), U("And squares?"), A("4")]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A tiny Qwen2 saved as save_pretrained writes it, five times: its own template, Qwen3's history rule,
    Qwen2's default system turn, Qwen2.5-Instruct's and Qwen3-8B's real templates (tools)."""
    from mmtune.models.tiny import build_tiny

    model, tok = build_tiny("tiny/qwen2")
    root, out = tmp_path_factory.mktemp("folders"), {}
    for name, rewrite in (("plain", lambda t: t), ("qwen3", lambda t: QWEN3_LIKE), ("qwen2", QWEN2_DEFAULT_SYSTEM.__add__),
                          ("qwen25", lambda t: QWEN25), ("qwen3_real", lambda t: QWEN3_REAL)):
        folder = out[name] = root / name
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        path = folder / "chat_template.jinja"
        path.write_text(rewrite(path.read_text()))
    return out


def _data(tmp_path, rows, name="train.jsonl"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _tree(tmp_path, folder, rows):
    return {"model": {"name": str(folder)}, "data": {"train": str(_data(tmp_path, rows))}}


def _encoder(tmp_path, folder):
    from mmtune.data.encode import Encoder

    return Encoder.for_run(context_for(tmp_path, _tree(tmp_path, folder, [{"messages": PLAIN_TWO_TURNS}])).need("resolved"))


def _trained(enc, messages) -> str:
    out = enc.encode(Record("r0", "x", messages))
    return enc.tokenizer.decode(out["input_ids"].reshape(-1)[out["labels"].reshape(-1) != -100])


# ----------------------------------------------------------------------------- Qwen3: answers rewritten in history
# https://github.com/modelscope/ms-swift/issues/4939, https://github.com/hiyouga/LlamaFactory/issues/8634,
# https://github.com/hiyouga/LlamaFactory/issues/10336, https://github.com/modelscope/ms-swift/issues/9829,
# https://github.com/PrimeIntellect-ai/prime-rl/issues/1334: Qwen3's template drops earlier answers' <think> blocks
# once a later user turn follows, so the conversation up to an answer does not prefix the whole. mmtune stopped
# every multi-turn record (`data inspect`, the doctor, `train`) with "renders a conversation differently from its
# own prefix ... report this model to mmtune"; now earlier such answers are context and MM195 says so.

@pytest.mark.parametrize("turns", [TWO_TURNS, PLAIN_TWO_TURNS], ids=["with-reasoning", "without"])
def test_qwen3_multi_turn_records_train_the_last_answer_and_keep_earlier_ones_as_context(tmp_path, folders, turns):
    enc = _encoder(tmp_path, folders["qwen3"])
    rendered = enc.rendered(Record("r0", "x", turns))
    assert "<|im_start|>assistant\n3<|im_end|>" in rendered  # the earlier answer as history shows it: context
    trained = _trained(enc, turns)
    assert "3" not in trained and "count them" not in trained
    # the last answer as the data writes it: with its reasoning; without, the template's empty block stays prompt (MM072)
    assert trained == ("<think>\nfour of them\n</think>\n\n4<|im_end|>" if turns is TWO_TURNS else "4<|im_end|>")
    # the clean twin: a template that renders history as it renders the last answer trains both
    both = _trained(_encoder(tmp_path / "plain", folders["plain"]), PLAIN_TWO_TURNS)
    assert "3<|im_end|>" in both and "4<|im_end|>" in both


def test_mm195_says_how_many_answers_a_rewritten_history_leaves_untrained(tmp_path, folders):
    rows = [{"messages": TWO_TURNS}, {"messages": PLAIN_TWO_TURNS}, {"messages": PLAIN_TWO_TURNS[:2]}]
    (f,) = run_codes(context_for(tmp_path, _tree(tmp_path, folders["qwen3"], rows)), "MM195").findings
    assert f.severity == "warning" and "train: 2 answer(s) in 2 multi-turn record(s)" in f.message
    assert "one record per answer" in f.fix and f.where.startswith(str(tmp_path / "train.jsonl") + ":1")
    # silent: the same data under a template that keeps history as it is, and single-answer data under Qwen3's
    (tmp_path / "p").mkdir()
    (tmp_path / "s").mkdir()
    assert not run_codes(context_for(tmp_path / "p", _tree(tmp_path, folders["plain"], rows)), "MM195").findings
    single = [{"messages": PLAIN_TWO_TURNS[:2]}] * 3
    assert not run_codes(context_for(tmp_path / "s", _tree(tmp_path, folders["qwen3"], single)), "MM195").findings


# ----------------------------------------------------------------------------- tool-calling records
# https://github.com/fw-ai/cookbook/pull/442, https://github.com/OpenRLHF/OpenRLHF/issues/1079,
# https://github.com/huggingface/trl/pull/6259 (a row's `tools` list dropped: the model trains without the tools the
# data names), https://github.com/SalesforceAIResearch/xLAM/issues/12 (xLAM's query / tools / answers),
# https://github.com/NovaSky-AI/SkyRL/pull/1675 (OpenAI `tool_calls` and `tool` turns). mmtune trained a `tools`
# row as plain chat without a word and refused `tool_calls` as "lacks a role or content"; then refused every
# tool-calling record. Since then they train where the model's template renders tools (tests/data/test_tool_calling.py)
# and are refused, saying so, where it does not; the layouts with no call to train stay refused when read.

TOOL_ROWS = [
    {"messages": [U("Weather in Paris?"), {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "content": "20"}, A("20 degrees")]},
    {"messages": [U("How many circles?"), A("3")], "tools": [{"type": "function", "function": {"name": "count"}}]},
    {"query": "Weather in Paris?", "tools": "[{\"name\": \"get_weather\"}]", "answers": "[{\"name\": \"get_weather\"}]"},
    {"conversations": [{"from": "human", "value": "Weather?"}, {"from": "gpt", "value": "<tool_call>{}</tool_call>"},
                       {"from": "tool", "value": "20"}, {"from": "gpt", "value": "20 degrees"}]},
]
FIXTURES = Path(__file__).parent.parent / "data" / "fixtures"
QWEN25 = (FIXTURES / "qwen2_5_instruct_chat_template.jinja").read_text()
QWEN3_REAL = (FIXTURES / "qwen3_chat_template.jinja").read_text()


def test_tool_calling_records_train_under_a_tools_template_and_are_refused_under_others(tmp_path, folders):
    from mmtune.data.inspect import scan_records

    rows = [*TOOL_ROWS, {"messages": [U("How many circles?"), A("3")], "tools": []},  # clean twins: no tools in them
            {"messages": [U("How many circles?"), {"role": "assistant", "content": "3", "tool_calls": None}]}]
    rs = load_records(str(_data(tmp_path, rows)), DataConfig(on_bad_record="skip"))
    assert rs.skipped == {"bad tool call": 2} and len(rs) == 4, rs.problems  # xLAM's rows; a result with no call
    said = [what for _, what in rs.problems]
    assert "record has a 'tools' field but no messages" in said[0] and "tool result with no tool call" in said[1]
    # a template without tools (the tiny Qwen2's own): each tool record refused as what it is, the twins train
    plain = scan_records(rs, _encoder(tmp_path / "p", folders["plain"]), "skip")
    assert plain.records.skipped == {"bad tool call": 2, "tools not rendered": 2} and len(plain.records) == 2
    what = [w for _, w in plain.records.problems[2:]]
    assert "cannot render tool calls and their results" in what[0] and "cannot render tool schemas" in what[1]
    # Qwen2.5's real template: both train, the call as the template writes it
    enc = _encoder(tmp_path / "q", folders["qwen25"])
    assert len(scan_records(rs, enc, "skip").records) == 4
    assert _trained(enc, rs.records[0].messages) == ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
                                                     '\n</tool_call><|im_end|>20 degrees<|im_end|>')
    assert "<tools>" in enc.rendered(rs.records[1]) and "<tools>" not in enc.rendered(rs.records[2])
    # the doctor's data pass reads them as training does: clean under Qwen2.5's template, MM014 under the other
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2").mkdir()
    assert not run_codes(context_for(tmp_path / "d1", _tree(tmp_path / "d1", folders["qwen25"], TOOL_ROWS[:2])),
                         "MM014").findings
    found = run_codes(context_for(tmp_path / "d2", _tree(tmp_path / "d2", folders["plain"], TOOL_ROWS[:2])), "MM014")
    assert any("tools not rendered" in f.message for f in found.findings), [f.message for f in found.findings]
    # Qwen3's real template: a call followed by its result is context (its think-block rule), and MM195 counts it
    (tmp_path / "d3").mkdir()
    found = run_codes(context_for(tmp_path / "d3", _tree(tmp_path / "d3", folders["qwen3_real"], TOOL_ROWS[:1])), "MM195")
    assert [f.message.split(" multi-turn")[0] for f in found.findings] == ["train: 1 answer(s) in 1"]
    assert not run_codes(context_for(tmp_path / "d1", _tree(tmp_path / "d1", folders["qwen25"], TOOL_ROWS[:1])),
                         "MM195").findings  # Qwen2.5 trains that call


# ----------------------------------------------------------------------------- pinned: system prompts
# https://github.com/QwenLM/Qwen/issues/1089, https://github.com/hiyouga/LlamaFactory/issues/7592 (the data's own
# system prompt replaced by "You are a helpful assistant."), https://github.com/hiyouga/LlamaFactory/pull/10772 (a
# tool's own Qwen2 template whose default system differs from the model's), https://github.com/modelscope/ms-swift/issues/4020
# (a system prompt in training, none at inference). mmtune renders with the model's own template everywhere: the
# template's default when the record has none, the record's own when it has one, the same in the eval prompt.

def test_the_templates_default_system_turn_is_trained_and_prompted_alike(tmp_path, folders):
    enc = _encoder(tmp_path, folders["qwen2"])
    record = Record("r0", "x", PLAIN_TWO_TURNS[:2])
    prompt = enc.tokenizer.decode(enc.encode_prompt(record)["input_ids"].reshape(-1))
    assert enc.rendered(record).startswith(prompt) and prompt.startswith("<|im_start|>system\nYou are a helpful assistant.")
    own = Record("r1", "x", [{"role": "system", "content": "You count shapes."}, *PLAIN_TWO_TURNS[:2]])
    assert "helpful" not in enc.rendered(own) and "You count shapes." in enc.rendered(own)
    rows = [{"instruction": "How many circles?", "input": "", "output": "3", "system": "You count shapes."}]
    (alpaca,) = load_records(str(_data(tmp_path, rows, "alpaca.jsonl")), DataConfig(format="alpaca"))
    assert "You count shapes." in enc.rendered(alpaca) and "helpful" not in enc.rendered(alpaca)


# ----------------------------------------------------------------------------- pinned: turn shapes
# https://github.com/allenai/open-instruct/issues/161 (empty answers, batch 7) in its whitespace form; consecutive
# turns of one role (https://github.com/lm-sys/FastChat/issues/631 family): rendered as written, every answer trained.

def test_whitespace_answers_are_no_answer_and_consecutive_turns_render_as_written(tmp_path, folders):
    from mmtune.data.formats import BadRecord

    enc = _encoder(tmp_path, folders["plain"])
    for answer in ("  \n ", "\n"):
        with pytest.raises(BadRecord, match="no answer text"):
            enc.encode(Record("r0", "x", [U("How many circles?"), A(answer)]))
    two_users = [U("How many circles?"), U("Answer with a number."), A("3")]
    assert "Answer with a number.<|im_end|>\n<|im_start|>assistant\n3" in enc.rendered(Record("r1", "x", two_users))
    assert _trained(enc, [U("How many circles?"), A("3"), A("4")]) == "3<|im_end|>4<|im_end|>"


# ----------------------------------------------------------------------------- pinned: images in later turns
# https://github.com/2U1/Qwen-VL-Series-Finetune/pull/176 (the second turn's image token mapped to the first image),
# https://github.com/haotian-liu/LLaVA/issues/1086 (images anywhere but the first turn): each `<image>` takes the
# next file of `images` where it stands, and an image in a later turn is placed there.

def test_images_in_later_turns_are_placed_where_their_tags_stand(tmp_path):
    from mmtune.data.encode import Encoder

    Image.new("RGB", (56, 56), "red").save(tmp_path / "small.png")
    Image.new("RGB", (112, 56), "blue").save(tmp_path / "wide.png")
    turns = [{"from": "human", "value": "<image>\nWhat colour?"}, {"from": "gpt", "value": "red"},
             {"from": "human", "value": "<image>\nAnd this one?"}, {"from": "gpt", "value": "blue"}]
    rows = [{"conversations": turns, "images": ["small.png", "wide.png"]},
            {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "hello"},
                               {"from": "human", "value": "<image>\nWhat colour?"}, {"from": "gpt", "value": "blue"}],
             "images": ["wide.png"]}]
    both, later = load_records(str(_data(tmp_path, rows)), DataConfig())
    enc = Encoder.for_run(context_for(tmp_path, TINY_VL).need("resolved"))
    grids = enc.encode(both)["image_grid_thw"].tolist()
    assert grids[0] != grids[1] and grids[1][2] == 2 * grids[0][2]  # the wide image second, where its tag is
    text = enc.rendered(later)
    assert text.index("<|image_pad|>") > text.index("hello")  # after the first answer, not moved to the front
    assert enc.encode(later)["image_grid_thw"].tolist() == [grids[1]]
