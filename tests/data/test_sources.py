"""Sources and formats: every format, split aliases, bad input named by file/record with a fix."""

from __future__ import annotations

import json

import pytest

from mmtune.config.schema import DataConfig
from mmtune.data.sources import load_records
from mmtune.errors import ConfigError, DataError

from .conftest import jsonl, write_png


def test_messages_format_jsonl(imgs):
    f = jsonl(imgs / "train.jsonl", [
        {"messages": [{"role": "user", "content": [{"type": "image", "path": "a.png"}, {"type": "text", "text": "How many?"}]},
                      {"role": "assistant", "content": "3"}]},
        {"id": "second", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
    ])
    rs = load_records(str(f), DataConfig())
    assert len(rs) == 2 and not rs.skipped
    r = rs[0]
    assert r.id == "0" and r.source == f"{f}:1"
    assert r.messages[0]["content"][0] == {"type": "image", "path": str(imgs / "a.png")}
    assert r.answer_text() == "3"
    assert rs[1].id == "second" and rs[1].source == f"{f}:2"
    assert rs[1].messages[1]["content"] == [{"type": "text", "text": "hello"}]


def test_messages_with_top_level_images_and_placeholders(imgs):
    f = jsonl(imgs / "d.jsonl", [
        {"images": ["a.png", "b.png"], "conversations": [
            {"from": "human", "value": "<image>first <image>second"}, {"from": "gpt", "value": "two"}]},
    ])
    r = load_records(str(f), DataConfig())[0]
    parts = r.messages[0]["content"]
    assert [p["type"] for p in parts] == ["image", "text", "image", "text"]
    assert parts[0]["path"].endswith("a.png") and parts[2]["path"].endswith("b.png")
    assert r.messages[1]["role"] == "assistant"


def test_placeholder_count_mismatch_names_record(imgs):
    f = jsonl(imgs / "d.jsonl", [
        {"images": ["a.png", "b.png"], "messages": [
            {"role": "user", "content": "<image> what?"}, {"role": "assistant", "content": "x"}]},
    ])
    with pytest.raises(DataError) as e:
        load_records(str(f), DataConfig())
    assert f"{f}:1" in str(e.value) and "2 image(s) given, 1 <image> placeholder" in str(e.value)
    assert "one <image>" in e.value.fix


def test_vqa_chartqa_infovqa_ocrvqa(imgs):
    vqa = jsonl(imgs / "vqa.jsonl", [{"image": "a.png", "question": "Colour?", "answer": "red"}])
    r = load_records(str(vqa), DataConfig(format="vqa"))[0]
    assert r.messages[0]["content"][1]["text"] == "Colour?" and r.answer_text() == "red"

    chart = jsonl(imgs / "chart.jsonl", [{"imgname": "a.png", "query": "Max value?", "label": ["14"]}])
    r = load_records(str(chart), DataConfig(format="chartqa"))[0]
    assert r.answer_text() == "14" and r.messages[0]["content"][0]["path"].endswith("a.png")

    info = jsonl(imgs / "info.jsonl", [{"image": "b.png", "query": "Year?", "answers": ["1999", "in 1999"]}])
    r = load_records(str(info), DataConfig(format="infovqa"))[0]
    assert r.answer_text() == "1999" and r.references == ["1999", "in 1999"]

    ocr = jsonl(imgs / "ocr.jsonl", [{"image_id": "bk1", "image": "a.png", "questions": ["Title?", "Author?", "Genre?"],
                                     "answers": ["Dune", "Herbert", "SF"]}])
    rs = load_records(str(ocr), DataConfig(format="ocrvqa"))
    assert [x.id for x in rs] == ["bk1#0", "bk1#1", "bk1#2"]
    assert [x.answer_text() for x in rs] == ["Dune", "Herbert", "SF"]
    assert all(x.messages[0]["content"][0]["path"].endswith("a.png") for x in rs)


def test_missing_field_lists_existing_fields_and_columns_fix(imgs):
    # The seed-002 KeyError: a ChartQA file read as plain VQA.
    f = jsonl(imgs / "chart.jsonl", [{"image": "a.png", "query": "Max?", "label": "14"}])
    with pytest.raises(DataError) as e:
        load_records(str(f), DataConfig(format="vqa"))
    msg = str(e.value)
    assert f"{f}:1" in msg and "'question'" in msg
    assert "image, label, query" in msg and "data.columns" in msg
    # ... and the column mapping fixes it.
    r = load_records(str(f), DataConfig(format="vqa", columns={"question": "query", "answer": "label"}))[0]
    assert r.answer_text() == "14"


def test_unknown_column_name_is_a_config_error_with_suggestion(imgs):
    f = jsonl(imgs / "v.jsonl", [{"image": "a.png", "question": "q", "answer": "a"}])
    with pytest.raises(ConfigError) as e:
        load_records(str(f), DataConfig(format="vqa", columns={"questoin": "query"}))
    assert "'question'" in e.value.fix
    with pytest.raises(ConfigError) as e:
        load_records(str(f), DataConfig(format="chartqaa"))
    assert "chartqa" in e.value.fix


def test_missing_image_error_and_skip_policy(imgs):
    f = jsonl(imgs / "v.jsonl", [
        {"image": "a.png", "question": "q", "answer": "a"},
        {"image": "nope.png", "question": "q", "answer": "a"},
        {"image": "a.png", "question": "q"},
        {"image": "a.png", "question": "q", "answer": ""},
    ])
    with pytest.raises(DataError) as e:
        load_records(str(f), DataConfig(format="vqa"))
    assert f"{f}:2" in str(e.value) and "nope.png" in str(e.value) and "on_bad_record=skip" in e.value.fix
    rs = load_records(str(f), DataConfig(format="vqa", on_bad_record="skip"))
    assert len(rs) == 1
    assert rs.skipped == {"missing media": 1, "no answer": 2}
    assert [src for src, _ in rs.problems] == [f"{f}:2", f"{f}:3", f"{f}:4"]


def test_media_root_resolves_relative_paths(tmp_path):
    media = tmp_path / "pics"
    media.mkdir()
    write_png(media / "x.png")
    f = jsonl(tmp_path / "v.jsonl", [{"image": "x.png", "question": "q", "answer": "a"}])
    r = load_records(str(f), DataConfig(format="vqa", media_root=str(media)))[0]
    assert r.messages[0]["content"][0]["path"] == str(media / "x.png")


def test_json_list_and_parquet(imgs):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (imgs / "d.json").write_text(json.dumps([{"image": "a.png", "question": "q", "answer": "a"}] * 2))
    rs = load_records(str(imgs / "d.json"), DataConfig(format="vqa"))
    assert len(rs) == 2 and rs[1].source == f"{imgs / 'd.json'}:record 1"

    png = (imgs / "a.png").read_bytes()
    table = pa.table({"image": [{"bytes": png, "path": "a.png"}], "query": ["Max?"], "label": ["7"]})
    pq.write_table(table, imgs / "d.parquet")
    r = load_records(str(imgs / "d.parquet"), DataConfig(format="chartqa"))[0]
    assert r.messages[0]["content"][0]["bytes"] == png and r.answer_text() == "7"


def test_datasets_folder_val_alias_and_missing_split(tmp_path):
    import datasets
    from PIL import Image

    img = Image.new("RGB", (32, 32), "red")
    rows = {"image": [img, img], "query": ["a?", "b?"], "answers": [["x", "y"], ["z"]]}
    feats = datasets.Features({"image": datasets.Image(), "query": datasets.Value("string"),
                               "answers": datasets.Sequence(datasets.Value("string"))})
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows, features=feats),
                               "val": datasets.Dataset.from_dict(rows, features=feats)})
    dd.save_to_disk(str(tmp_path / "ds"))
    cfg = DataConfig(format="infovqa")
    rs = load_records(str(tmp_path / "ds"), cfg, split="eval")  # `val` found for the eval split
    assert len(rs) == 2 and "[val]" in rs[0].source and rs[0].references == ["x", "y"]
    assert rs[0].messages[0]["content"][0]["bytes"][:4] == b"\x89PNG"
    with pytest.raises(DataError) as e:
        load_records(str(tmp_path / "ds"), cfg, split="test")
    assert "splits found: train, val" in e.value.fix


def test_folder_of_split_files(imgs):
    d = imgs / "splits"
    d.mkdir()
    write_png(d / "a.png")
    jsonl(d / "train.jsonl", [{"image": "a.png", "question": "q", "answer": "t"}])
    jsonl(d / "dev.jsonl", [{"image": "a.png", "question": "q", "answer": "e"}])
    assert load_records(str(d), DataConfig(format="vqa"), "train")[0].answer_text() == "t"
    assert load_records(str(d), DataConfig(format="vqa"), "eval")[0].answer_text() == "e"


def test_bad_json_line_and_record_without_answer(imgs):
    f = imgs / "bad.jsonl"
    f.write_text('{"messages": [{"role": "user", "content": "q"}]}\n{not json\n')
    with pytest.raises(DataError) as e:
        load_records(str(f), DataConfig())
    assert f"{f}:1" in str(e.value) and "no assistant turn" in str(e.value)
    with pytest.raises(DataError) as e:  # nothing usable under skip: still an error, with the counts
        load_records(str(f), DataConfig(on_bad_record="skip"))
    assert "no answer" in str(e.value) and "bad json" in str(e.value)


def test_missing_source_file(tmp_path):
    with pytest.raises(DataError) as e:
        load_records(str(tmp_path / "none.jsonl"), DataConfig())
    assert "does not exist" in str(e.value) and "synthetic:counting" in e.value.fix


def test_damaged_save_to_disk_folders_are_data_errors(tmp_path):
    """datasets' own failures on such folders (an IndexError for an empty save, a cut Arrow file) are said as
    what they are, with the folder: found by the records fuzzer (seed 7: a save of rows without columns)."""
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list([{}, {}]).save_to_disk(str(tmp_path / "empty"))
    with pytest.raises(DataError) as e:
        load_records(str(tmp_path / "empty"), DataConfig(format="messages"), "train")
    assert "holds no records" in str(e.value) and "state.json" in e.value.where
    datasets.Dataset.from_list([{"question": "q", "answer": "a"}] * 50).save_to_disk(str(tmp_path / "cut"))
    arrow = next((tmp_path / "cut").glob("*.arrow"))
    arrow.write_bytes(arrow.read_bytes()[:200])
    with pytest.raises(DataError) as e:
        load_records(str(tmp_path / "cut"), DataConfig(format="vqa"), "train")
    assert "not a readable dataset saved with save_to_disk" in str(e.value) and str(tmp_path / "cut") in e.value.where
