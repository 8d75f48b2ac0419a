"""Other tools' data layouts: each read as its tool means it, or refused with the reason."""

from __future__ import annotations

import base64
import csv
import json

import pytest

from mmtune.config import load_config
from mmtune.config.schema import DataConfig
from mmtune.data.records import part_text
from mmtune.data.sources import load_records
from mmtune.errors import DataError

from .conftest import jsonl, write_wav


def shape(record):
    """[(role, [part kinds or text])] — what the encoder will render."""
    return [(m["role"], [p["text"] if p["type"] == "text" else p["type"] for p in m["content"]])
            for m in record.messages]


def test_alpaca_with_input_history_system_and_images(imgs):
    f = jsonl(imgs / "a.jsonl", [
        {"instruction": "Count the shapes.", "input": "Only circles.", "output": "3", "system": "Be brief.",
         "history": [["Hi", "Hello"]], "images": ["a.png"]},
        {"instruction": "<image>What colour?", "input": "", "output": "red", "images": ["a.png"]},
    ])
    for fmt in ("alpaca", "messages"):  # named, or recognised under the default format
        rs = load_records(str(f), DataConfig(format=fmt))
        assert shape(rs[0]) == [("system", ["Be brief."]), ("user", ["Hi"]), ("assistant", ["Hello"]),
                                ("user", ["image", "Count the shapes.\nOnly circles."]), ("assistant", ["3"])]
        assert rs[0].messages[3]["content"][0]["path"] == str(imgs / "a.png")
        assert shape(rs[1]) == [("user", ["image", "What colour?"]), ("assistant", ["red"])]


def test_alpaca_columns_and_missing_instruction(imgs):
    f = jsonl(imgs / "a.jsonl", [{"prompt": "Say hi", "output": "hi"}])
    rs = load_records(str(f), DataConfig(format="alpaca", columns={"instruction": "prompt"}))
    assert shape(rs[0]) == [("user", ["Say hi"]), ("assistant", ["hi"])]
    with pytest.raises(DataError) as e:
        load_records(str(f), DataConfig(format="alpaca"))
    assert "instruction" in e.value.what and "prompt" in e.value.fix and f"{f}:1" in str(e.value)


def test_ms_swift_media_without_tags_open_the_first_user_turn(imgs):
    f = jsonl(imgs / "s.jsonl", [
        {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "Compare them."},
                      {"role": "assistant", "content": "same"}], "images": ["a.png", "b.png"]},
    ])
    r = load_records(str(f), DataConfig())[0]
    assert shape(r) == [("system", ["sys"]), ("user", ["image", "image", "Compare them."]), ("assistant", ["same"])]
    assert [p["path"] for p in r.media_parts()] == [str(imgs / "a.png"), str(imgs / "b.png")]


def test_ms_swift_query_response_history(imgs):
    f = jsonl(imgs / "q.jsonl", [{"query": "And now?", "response": "2", "history": [["How many?", "1"]],
                                  "images": ["a.png"], "system": "Count."}])
    r = load_records(str(f), DataConfig())[0]
    assert shape(r) == [("system", ["Count."]), ("user", ["image", "How many?"]), ("assistant", ["1"]),
                        ("user", ["And now?"]), ("assistant", ["2"])]


def test_bad_history_is_refused_with_the_shape_wanted(imgs):
    f = jsonl(imgs / "q.jsonl", [{"query": "q", "response": "r", "history": ["just one string"]}])
    with pytest.raises(DataError) as e:
        load_records(str(f), DataConfig())
    assert "history" in e.value.what and "[question, answer]" in e.value.what


def test_openai_content_parts(imgs):
    png = (imgs / "b.png").read_bytes()
    wav = write_wav(imgs / "s.wav", seconds=0.2, sr=16000).read_bytes()
    f = jsonl(imgs / "o.jsonl", [{"messages": [
        {"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "a.png"}},
            {"type": "image_url", "image_url": {"url": f"file://{imgs / 'a.png'}"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}},
            {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"}},
            {"type": "text", "text": "Describe."}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "pictures"}]}]}])
    r = load_records(str(f), DataConfig())[0]
    parts = r.messages[0]["content"]
    assert [p["type"] for p in parts] == ["image", "image", "image", "audio", "text"]
    assert parts[0]["path"] == parts[1]["path"] == str(imgs / "a.png")
    assert parts[2]["bytes"] == png and parts[3]["bytes"] == wav
    assert r.answer_text() == "pictures"
    # The media load as they would for training.
    from mmtune.data.media import load_audio, load_image

    assert load_image(parts[2]).size == (64, 48)
    assert load_audio(parts[3], sampling_rate=16000).shape[0] == 3200


def test_openai_parts_that_cannot_be_read_are_refused(imgs):
    rows = [{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.org/a.png"}},
                                                        {"type": "text", "text": "?"}]},
                          {"role": "assistant", "content": "a"}]},
            {"messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}},
                                                        {"type": "text", "text": "?"}]},
                          {"role": "assistant", "content": "a"}]}]
    f = jsonl(imgs / "o.jsonl", rows)
    with pytest.raises(DataError) as e:
        load_records(str(f), DataConfig())
    assert "URL" in e.value.what and "local files" in e.value.what
    jsonl(imgs / "o.jsonl", rows + [{"messages": [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "a"}]}])
    rs = load_records(str(f), DataConfig(on_bad_record="skip"))
    assert len(rs) == 1 and rs.n_skipped == 2
    assert any("video given as a data: URL" in what for _, what in rs.problems)


def test_a_data_url_without_its_data_is_named_not_decoded(imgs):
    """"data:image/png;base64" with no comma and data: the URL's shape is named (it was PIL's 'cannot identify')."""
    rows = [{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                        {"type": "text", "text": "?"}]},
                          {"role": "assistant", "content": "a"}]} for url in ("data:image/png;base64", "data:image/png;base64,")]
    f = jsonl(imgs / "d.jsonl", rows + [{"messages": [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "a"}]}])
    rs = load_records(str(f), DataConfig(on_bad_record="skip"))
    assert len(rs) == 1 and rs.n_skipped == 2
    assert [what for _, what in rs.problems].count("the image data: URL holds no data (expected data:<mime>;base64,<data>)") == 2


def test_a_part_whose_type_is_not_a_string_is_named(imgs):
    """A list or a dict as a part's type (the records fuzzer, seed 42) reached the record boundary as an
    "unhashable type" TypeError from the OpenAI-part reader; it is the format's "not text/image/video/audio"."""
    rows = [{"messages": [{"role": "user", "content": [{"type": t, "path": "a.png"}, {"type": "text", "text": "?"}]},
                          {"role": "assistant", "content": "a"}]} for t in (["image"], {"image": 1})]
    f = jsonl(imgs / "t.jsonl", rows + [{"messages": [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "a"}]}])
    rs = load_records(str(f), DataConfig(on_bad_record="skip"))
    assert len(rs) == 1 and rs.n_skipped == 2
    assert all("that is not text/image/video/audio" in what for _, what in rs.problems), rs.problems


def test_top_level_system_is_kept_in_every_format(imgs):
    f = jsonl(imgs / "m.jsonl", [
        {"system": "You count.", "messages": [{"role": "user", "content": "n?"}, {"role": "assistant", "content": "1"}]},
        {"system": "You count.", "conversations": [{"from": "system", "value": "own"}, {"from": "human", "value": "n?"},
                                                  {"from": "gpt", "value": "1"}]},
    ])
    rs = load_records(str(f), DataConfig())
    assert shape(rs[0])[0] == ("system", ["You count."])
    assert shape(rs[1])[0] == ("system", ["own"]) and len(rs[1].messages) == 3  # the record's own wins
    v = jsonl(imgs / "v.jsonl", [{"system": "Short answers.", "image": "a.png", "question": "Colour?", "answer": "red"}])
    assert shape(load_records(str(v), DataConfig(format="vqa"))[0])[0] == ("system", ["Short answers."])


def test_alpaca_through_vqa_places_the_image_instead_of_training_on_the_tag(imgs):
    f = jsonl(imgs / "a.jsonl", [{"instruction": "Look: <image> how many?", "output": "3", "images": ["a.png"]},
                                 {"instruction": "<image><image> which?", "output": "a", "images": ["a.png"]}])
    cfg = load_config(None, ["model.name=tiny/qwen2-vl", "data.format=vqa", "data.on_bad_record=skip",
                             "data.columns={question:instruction,answer:output,image:images}"])
    rs = load_records(str(f), cfg.data)
    assert shape(rs[0]) == [("user", ["Look: ", "image", " how many?"]), ("assistant", ["3"])]
    assert "<image>" not in part_text(rs[0].messages[0]["content"])
    assert rs.skipped == {"placeholder mismatch": 1}
    assert "1 image(s), 2 <image> tag(s)" in rs.problems[0][1]


def test_columns_without_spaces_parse_as_a_mapping(tmp_path):
    cfg = load_config(None, ["model.name=tiny/qwen2-vl", "data.columns={question:instruction}"])
    assert cfg.data.columns == {"question": "instruction"}
    y = tmp_path / "c.yaml"
    y.write_text("model: {name: tiny/qwen2-vl}\ndata: {format: vqa, columns: {question:prompt, answer:response}}\n")
    assert load_config(y, []).data.columns == {"question": "prompt", "answer": "response"}


def test_parquet_columns_of_json_text_are_read_as_csv_cells_are(imgs):
    """A table exported from pandas with json.dumps columns: the messages and images parse (they were
    'missing field'); a cell that is not valid JSON is that row's bad record, located by row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    conv = json.dumps([{"role": "user", "content": "<image>?"}, {"role": "assistant", "content": "x"}])
    f = imgs / "t.parquet"
    pq.write_table(pa.table({"messages": [conv, "[not json"], "images": [json.dumps([str(imgs / "a.png")])] * 2}), f)
    rs = load_records(str(f), DataConfig(on_bad_record="skip"))
    assert len(rs) == 1 and shape(rs[0]) == [("user", ["image", "?"]), ("assistant", ["x"])]
    assert rs.skipped == {"bad parquet": 1} and rs.problems[0][0] == f"{f}:row 1"


def test_csv_files(imgs):
    f = imgs / "train.csv"
    with open(f, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["image", "question", "answer"])
        w.writerow(["a.png", "What colour, roughly?", "red"])
        w.writerow(["b.png", "And this one?", "blue"])
    rs = load_records(str(f), DataConfig(format="vqa"))
    assert [r.answer_text() for r in rs] == ["red", "blue"]
    assert shape(rs[0])[0] == ("user", ["image", "What colour, roughly?"]) and rs[0].source == f"{f}:2"
    # Lists and conversations as JSON in a cell; the folder's split file is found as for JSONL.
    g = imgs / "conv" / "validation.csv"
    g.parent.mkdir()
    with open(g, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["messages", "images"])
        w.writerow([json.dumps([{"role": "user", "content": "<image>?"}, {"role": "assistant", "content": "x"}]),
                    json.dumps([str(imgs / "a.png")])])
        w.writerow(["[not json", "[]"])
    rs = load_records(str(g.parent), DataConfig(on_bad_record="skip"), split="val")
    assert shape(rs[0]) == [("user", ["image", "?"]), ("assistant", ["x"])]
    assert rs.skipped == {"bad csv": 1} and f"{g}:3" == rs.problems[0][0]
