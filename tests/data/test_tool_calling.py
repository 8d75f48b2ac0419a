"""Tool-calling (function-calling) records: OpenAI's and LLaMA-Factory's ShareGPT layouts read into one record,
rendered by Qwen2.5-Instruct's real chat template (tests/data/fixtures, on the tiny Qwen2's local tokenizer), and
trained on exactly what the template writes for each assistant turn, calls included; the tool results and the
schemas are context. A template that renders no tools refuses such records; bad shapes are counted records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mmtune.config.schema import DataConfig, RunConfig
from mmtune.data.encode import Encoder
from mmtune.data.formats import BadRecord
from mmtune.data.records import Record
from mmtune.data.sources import load_records
from mmtune.errors import DataError

QWEN25_TEMPLATE = (Path(__file__).parent / "fixtures" / "qwen2_5_instruct_chat_template.jinja").read_text()
WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
OPENAI = {"messages": [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "20 degrees"},
    {"role": "assistant", "content": "It is 20 degrees."}], "tools": [{"type": "function", "function": WEATHER}]}
SHAREGPT = {"conversations": [  # glaive-function-calling-v2 as LLaMA-Factory writes it: tools a JSON string
    {"from": "human", "value": "Weather in Paris?"},
    {"from": "function_call", "value": json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})},
    {"from": "observation", "value": "20 degrees"},
    {"from": "gpt", "value": "It is 20 degrees."}], "tools": json.dumps([WEATHER])}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'  # Qwen2.5's call


def _tokenizer(template: str | None):
    """The tiny Qwen2's local tokenizer; with `template`, a copy of it rendering with that chat template."""
    import copy

    from mmtune.models.tiny import tiny_config_and_processor

    tok = copy.deepcopy(tiny_config_and_processor("tiny/qwen2")[1])  # may be shared: changed on a copy only
    if template is not None:
        tok.chat_template = template
    return tok


@pytest.fixture(scope="module")
def enc():
    return Encoder(_tokenizer(QWEN25_TEMPLATE), None, RunConfig.model_validate({"model": {"name": "tiny/qwen2"}}))


@pytest.fixture(scope="module")
def plain_enc():  # the tiny Qwen2's own template: no tools in it
    return Encoder(_tokenizer(None), None, RunConfig.model_validate({"model": {"name": "tiny/qwen2"}}))


def _load(tmp_path, rows, **data):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_records(str(path), DataConfig(**data))


def _trained_runs(out, tok) -> list[str]:
    """The labelled tokens, decoded run by run (each run: one trained answer)."""
    ids, labels = out["input_ids"].tolist(), out["labels"].tolist()
    runs, cur = [], []
    for i, lab in zip(ids, labels):
        if lab != -100:
            cur.append(i)
        elif cur:
            runs.append(tok.decode(cur))
            cur = []
    return runs + ([tok.decode(cur)] if cur else [])


def test_openai_and_sharegpt_layouts_give_the_same_record_tokens_and_labels(tmp_path, enc):
    rs = _load(tmp_path, [OPENAI, SHAREGPT])
    assert len(rs) == 2 and not rs.skipped
    a, b = rs.records
    assert a.tools == b.tools == [{"type": "function", "function": WEATHER}]
    calls = [m["tool_calls"] for m in a.messages if m.get("tool_calls")]
    assert calls == [[{"type": "function", "id": "call_1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]]
    assert [m["role"] for m in a.messages] == [m["role"] for m in b.messages] == ["user", "assistant", "tool", "assistant"]
    # ShareGPT turns carrying OpenAI's keys (from: gpt + tool_calls, from: tool) read the same
    mixed = {"conversations": [{"from": "human", "value": "Weather in Paris?"}, {"from": "gpt", "value": None,
             "tool_calls": OPENAI["messages"][1]["tool_calls"]}, {"from": "tool", "value": "20 degrees"},
             {"from": "gpt", "value": "It is 20 degrees."}], "tools": OPENAI["tools"]}
    c = _load(tmp_path, [mixed]).records[0]
    assert (c.messages, c.tools) == ([{k: v for k, v in m.items() if k != "tool_call_id"} for m in a.messages], a.tools)
    ea, eb = enc.encode(a), enc.encode(b)
    assert ea["input_ids"].tolist() == eb["input_ids"].tolist() and ea["labels"].tolist() == eb["labels"].tolist()


def test_labels_cover_exactly_each_call_and_answer_with_its_end_of_turn(tmp_path, enc):
    rec = _load(tmp_path, [OPENAI]).records[0]
    out = enc.encode(rec)
    text = enc.tokenizer.decode(out["input_ids"])
    assert "<tools>\n" + json.dumps({"type": "function", "function": WEATHER}) in text  # the schemas are in the prompt
    assert "<tool_response>\n20 degrees\n</tool_response>" in text
    assert _trained_runs(out, enc.tokenizer) == [CALL + "<|im_end|>", "It is 20 degrees.<|im_end|>"]
    # a call turn with text of its own, two calls at once: the text and both calls are trained, as written
    both = {**OPENAI, "messages": [OPENAI["messages"][0], {"role": "assistant", "content": "Checking both.", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
        {"role": "tool", "content": "20"}, {"role": "tool", "content": "25"}, {"role": "assistant", "content": "20 and 25."}]}
    runs = _trained_runs(enc.encode(_load(tmp_path, [both]).records[0]), enc.tokenizer)
    assert runs == ["Checking both.\n" + CALL + "\n" + CALL.replace("Paris", "Rome") + "<|im_end|>", "20 and 25.<|im_end|>"]


def test_under_qwen3s_template_a_call_is_trained_as_its_answers_are(tmp_path):
    """Qwen3 writes an empty think block before a last answer, and renders a turn after the last user query
    without it once a later turn follows: a last call is trained without the block (context, as before a plain
    answer), and a call followed by its result is context like any answer the template rewrites in history."""
    qwen3 = Encoder(_tokenizer((Path(__file__).parent / "fixtures" / "qwen3_chat_template.jinja").read_text()), None,
                    RunConfig.model_validate({"model": {"name": "tiny/qwen2"}}))
    rec = _load(tmp_path, [OPENAI]).records[0]
    last_call = Record(rec.id, rec.source, rec.messages[:2], tools=rec.tools)
    assert "<think>\n\n</think>\n\n" + CALL + "<|im_end|>" in qwen3.rendered(last_call)
    assert _trained_runs(qwen3.encode(last_call), qwen3.tokenizer) == [CALL + "<|im_end|>"]
    assert qwen3.answer_text(last_call) == CALL
    assert _trained_runs(qwen3.encode(rec), qwen3.tokenizer) == ["It is 20 degrees.<|im_end|>"]


def test_eval_prompts_with_the_tools_and_scores_the_call_as_the_template_writes_it(tmp_path, enc):
    rec = _load(tmp_path, [OPENAI]).records[0]
    upto_call = Record(rec.id, rec.source, rec.messages[:2], tools=rec.tools)
    assert enc.answer_text(upto_call) == CALL  # exact match compares generated text with this
    assert enc.answer_text(rec) == "It is 20 degrees."
    prompt = enc.tokenizer.decode(enc.encode_prompt(upto_call)["input_ids"])
    assert "get_weather" in prompt and prompt.endswith("Weather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    assert enc.rendered(rec).startswith(prompt)  # the prompt is the trained text's own beginning
    assert enc.measure(rec) == enc.token_counts(rec)  # lengths without encoding agree


def test_a_template_that_renders_no_tools_refuses_such_records_and_says_what_to_do(tmp_path, plain_enc):
    rec = _load(tmp_path, [OPENAI]).records[0]
    with pytest.raises(BadRecord) as e:
        plain_enc.encode(rec)
    assert e.value.reason == "tools not rendered" and "cannot render tool schemas" in e.value.what
    assert "train.jsonl:1" in str(e.value.where) and "chat template renders tools" in e.value.fix
    calls_only = Record(rec.id, rec.source, rec.messages)  # no schemas: the calls still need the template
    with pytest.raises(BadRecord, match="tool calls and their results"):
        plain_enc.measure(calls_only)
    with pytest.raises(BadRecord, match="tools not rendered|cannot render"):
        plain_enc.encode_prompt(Record(rec.id, rec.source, rec.messages[:1], tools=rec.tools))
    from mmtune.data.inspect import scan_records

    scan = scan_records(_load(tmp_path, [OPENAI, {"messages": OPENAI["messages"][:1] + [{"role": "assistant",
                                                                                         "content": "3"}]}]),
                        plain_enc, "skip")
    assert scan.records.skipped == {"tools not rendered": 1} and len(scan.records) == 1  # its plain twin trains


BAD = [
    ({**OPENAI, "messages": [OPENAI["messages"][0], {"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": "{city: Paris}"}}]}, *OPENAI["messages"][2:]]},
     "message 1's call 0's arguments is not valid JSON"),
    ({**SHAREGPT, "tools": "[{\"name\": \"get_weather\""}, "the 'tools' field is not valid JSON"),
    ({**SHAREGPT, "conversations": [SHAREGPT["conversations"][0], {"from": "function_call", "value": "{\"arguments\": {}}"},
                                    *SHAREGPT["conversations"][2:]]}, "message 1's call 0 has no function name"),
    ({**SHAREGPT, "conversations": [SHAREGPT["conversations"][0], {"from": "gpt", "value": "<tool_call>{}</tool_call>"},
                                    *SHAREGPT["conversations"][2:]]}, "message 2 is a tool result with no tool call before it"),
    ({"query": "Weather in Paris?", "tools": json.dumps([WEATHER]), "answers": "[]"}, "no messages / conversations"),
    ({"messages": OPENAI["messages"][:3], "tools": OPENAI["tools"]}, "ends with a tool result"),
]


def test_bad_tool_shapes_are_counted_records_with_where_and_fix(tmp_path):
    rs = _load(tmp_path, [row for row, _ in BAD] + [OPENAI], on_bad_record="skip")
    assert len(rs) == 1 and rs.skipped == {"bad tool call": 5, "bad conversation": 1}, rs.problems
    for (_, what), (_, said) in zip(rs.problems, BAD):
        assert said in what, (said, what)
    assert [w for w, _ in rs.problems] == [f"{tmp_path / 'train.jsonl'}:{i}" for i in range(1, len(BAD) + 1)]
    with pytest.raises(DataError) as e:  # under data.on_bad_record=error: the record's error, with its fix
        _load(tmp_path, BAD[0][:1])
    assert "not valid JSON" in str(e.value) and "JSON object" in str(e.value.fix)


def test_json_nested_past_the_parsers_depth_is_a_bad_tool_call(tmp_path):
    """Arguments or a `tools` string of 5,000 open brackets: json's scanner raised RecursionError, which reached
    the record boundary as `unreadable record` (found by the fuzzer, tests/data/fuzz_objectives.py); now each is
    the `bad tool call` it is, saying the JSON is nested too deeply."""
    deep = "[" * 5000
    call = json.loads(json.dumps(OPENAI))
    call["messages"][1]["tool_calls"][0]["function"]["arguments"] = deep
    rs = _load(tmp_path, [call, {**OPENAI, "tools": deep}, {**SHAREGPT, "tools": deep}, OPENAI], on_bad_record="skip")
    assert len(rs) == 1 and rs.skipped == {"bad tool call": 3}, rs.problems
    assert all("nested too deeply" in what for _, what in rs.problems), rs.problems


def test_a_turn_token_inside_a_call_or_a_schema_is_refused_as_in_any_text(tmp_path, enc):
    inside = json.loads(json.dumps(OPENAI))
    inside["messages"][1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"city": "Paris<|im_end|>"})
    schema = {**OPENAI, "tools": [{"type": "function", "function": {**WEATHER, "description": "<|im_start|>"}}]}
    for row, what in ((inside, "tool call text holds '<|im_end|>'"), (schema, "tool schema text holds '<|im_start|>'")):
        with pytest.raises(BadRecord) as e:
            enc.encode(_load(tmp_path, [row]).records[0])
        assert e.value.reason == "special token in text" and what in e.value.what


def test_the_tools_are_part_of_a_records_identity(tmp_path):
    from mmtune.doctor.datascan import record_key

    a, b = _load(tmp_path, [OPENAI, SHAREGPT]).records
    assert record_key(a) != record_key(b)  # OpenAI's call id: another record
    other_tools = {**SHAREGPT, "tools": json.dumps([{**WEATHER, "description": "Forecast"}])}
    other_args = json.loads(json.dumps(SHAREGPT))
    other_args["conversations"][1]["value"] = json.dumps({"name": "get_weather", "arguments": {"city": "Rome"}})
    b2, c, d = _load(tmp_path, [SHAREGPT, other_tools, other_args]).records
    assert record_key(b) == record_key(b2) and len({record_key(b), record_key(c), record_key(d)}) == 3


def test_dataset_info_sharegpt_entry_with_a_tools_column_reads_the_same_record(tmp_path, enc):
    (tmp_path / "glaive.json").write_text(json.dumps([{"conversations": SHAREGPT["conversations"],
                                                        "tools": SHAREGPT["tools"]}]))
    (tmp_path / "dataset_info.json").write_text(json.dumps({"glaive_toolcall": {
        "file_name": "glaive.json", "formatting": "sharegpt", "columns": {"messages": "conversations", "tools": "tools"}}}))
    reg = load_records("glaive_toolcall", DataConfig(dataset_info=str(tmp_path / "dataset_info.json")), "train").records[0]
    ref = _load(tmp_path, [SHAREGPT]).records[0]
    assert (reg.messages, reg.tools) == (ref.messages, ref.tools)
    assert enc.encode(reg)["labels"].tolist() == enc.encode(ref)["labels"].tolist()


def test_two_training_steps_on_tool_calling_data(tmp_path):
    from mmtune.commands.train import run_training
    from mmtune.models.tiny import build_tiny

    model, tok = build_tiny("tiny/qwen2")
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(QWEN25_TEMPLATE)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [OPENAI, SHAREGPT] * 2))
    out = tmp_path / "run"
    summary = run_training(None, [f"model.name={folder}", f"data.train={data}", "data.max_length=1024",
                                  "data.packing=true", "adapter.method=lora", "train.max_steps=2",
                                  "train.micro_batch_size=1", "train.precision=fp32", "train.device=cpu",
                                  "logging.tensorboard=false", f"output_dir={out}"])
    assert summary["steps"] == 2
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["kind"] == "train"]
    assert losses and all(math.isfinite(x) for x in losses)
