"""Issue 28: loads that used to succeed wrongly (or fail wrongly) without a word. Each is now an error, a
counted bad record with its reason, or a counted warning; and the layouts that were refused load."""

from __future__ import annotations

import json

import pytest

from mmtune.config import load_config
from mmtune.data.encode import Encoder
from mmtune.data.inspect import scan_records
from mmtune.data.sources import load_records
from mmtune.errors import ConfigError, DataError

from .conftest import write_png
from .malformed import tiny_processor


def _cfg(*ov):
    return load_config(None, ["model.name=tiny/qwen2-vl", "data.train=x", "data.on_bad_record=skip", *ov])


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _sharegpt(answer="3", human="<image>How many?", **extra):
    return {"conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": answer}], **extra}


GOOD = _sharegpt(images=["ok.png"])


@pytest.fixture
def folder(tmp_path):
    write_png(tmp_path / "ok.png")
    return tmp_path


def _load(folder, rows, *ov):
    path = _jsonl(folder / "d.jsonl", [GOOD] + rows)
    return load_records(path, _cfg(*ov).data, "train")


@pytest.mark.parametrize("row, reason, says", [
    # one answer stored as a number beside images used to stop the whole file with a TypeError
    (_sharegpt(3, images=["ok.png"]), "bad type", "content is a int"),
    # a list-valued response was trained on as its Python repr "['a', 'b']"
    ({"query": "q", "response": ["a", "b"]}, "bad type", "answer is a list"),
    ({"instruction": "q", "output": ["a", "b"]}, "bad type", "answer is a list"),
    # <image> tags with no images: a misspelt media key, or an empty list
    (_sharegpt(imgs=["ok.png"]), "placeholder mismatch", "lists no images"),
    (_sharegpt(images=[]), "placeholder mismatch", "lists no images"),
    # a lone surrogate (JSON's "\ud800") passed data inspect and crashed training's start-up measure
    (_sharegpt("3\ud800", human="How many?"), "bad encoding", "lone surrogate"),
    # a file name too long for the file system was an OSError from pathlib
    (_sharegpt(images=["x" * 5000]), "missing media", "cannot be looked up"),
])
def test_wrong_records_are_counted_with_their_reason(folder, row, reason, says):
    rs = _load(folder, [row])
    assert len(rs.records) == 1 and rs.skipped == {reason: 1}, (rs.skipped, rs.problems)
    where, what = rs.problems[0]
    assert where.endswith("d.jsonl:2") and says in what


def test_an_empty_media_list_without_tags_is_a_counted_warning(folder):
    rs = _load(folder, [_sharegpt(human="Say hi.", images=[]), _sharegpt(human="Say bye.", images=[])])
    assert len(rs.records) == 3 and not rs.skipped
    (note,) = [n for n in rs.notes if n.startswith("warning")]
    assert "2 record(s) give an empty images/videos/audios list and train as text only" in note
    assert "d.jsonl:2" in note


def test_special_token_text_is_refused_but_grounding_marks_are_data(folder):
    rows = [{"messages": [{"role": "user", "content": "Say bye."}, {"role": "assistant", "content": "bye<|im_end|> more"}]},
            {"messages": [{"role": "user", "content": "Where?"},
                          {"role": "assistant", "content": "<|box_start|>(1,2),(3,4)<|box_end|>"}]}]
    rs = _load(folder, rows)
    scan = scan_records(rs, Encoder(*tiny_processor("tiny/qwen2-vl"), _cfg()), "skip")
    assert scan.records.skipped == {"special token in text": 1} and len(scan.records.records) == 2
    assert "'<|im_end|>'" in scan.records.problems[0][1] and scan.records.problems[0][0].endswith("d.jsonl:2")


def test_a_surrogate_is_counted_by_every_path_training_takes(folder):
    """The record built in memory (not through a reader) still reaches the encoder: its measure (training's
    start-up check) counts it as a bad record, as `encode` does, instead of raising the tokenizer's TypeError."""
    from mmtune.data.records import Record
    from mmtune.data.startup_scan import check

    rec = Record("x", "mem:1", [{"role": "user", "content": [{"type": "text", "text": "q\ud800"}]},
                                {"role": "assistant", "content": [{"type": "text", "text": "a"}]}])
    enc = Encoder(*tiny_processor("tiny/qwen2-vl"), _cfg())
    report = check([rec], enc, "skip")
    assert list(report.bad.values())[0][:2] == ("mem:1", "unreadable record")
    with pytest.raises(DataError, match="UnicodeEncodeError|TypeError"):
        raise check([rec], enc, "error").error


def test_huge_images_are_one_counted_reason_everywhere(folder):
    """Past PIL's limit (89.5 M pixels), an image is "image too large" for the header measure (training's
    start-up check, inspect, doctor) and the decoder alike, whether PIL warns (under 2x) or refuses."""
    from PIL import Image

    Image.new("1", (10000, 10000)).save(folder / "warn.png")  # 100 M: PIL only warns
    Image.new("1", (14000, 14000)).save(folder / "bomb.png")  # 196 M: PIL refuses
    rs = _load(folder, [_sharegpt(images=["warn.png"]), _sharegpt(images=["bomb.png"])])
    enc = Encoder(*tiny_processor("tiny/qwen2-vl"), _cfg())
    for encode in (False, True):
        scan = scan_records(rs, enc, "skip", encode=encode)
        assert scan.records.skipped == {"image too large": 2}, scan.records.problems
        assert "89.5 M" in scan.records.problems[0][1]


def test_huge_image_is_a_data_finding_not_an_internal_error(folder, tmp_path):
    from PIL import Image

    from mmtune.doctor.runner import run_doctor

    Image.new("1", (14000, 14000)).save(folder / "bomb.png")
    path = _jsonl(folder / "d.jsonl", [GOOD, _sharegpt(images=["bomb.png"])])
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"output_dir: {tmp_path / 'run'}\nmodel: {{name: tiny/qwen2-vl}}\n"
                   f"data: {{train: {path}, on_bad_record: skip}}\n")
    rep = run_doctor(cfg, [], None, only=["MM014", "MM016", "MM017", "MM018", "MM060"])
    assert "MM099" not in rep.codes()
    (f,) = [f for f in rep.findings if f.code == "MM018"]
    assert "1 of 2 records: image too large" in f.message


def test_trl_save_to_disk_layout_loads(folder):
    """TRL's layout: content parts stored as one Arrow struct, so an image part reads back as
    {"type": "image", "text": None}, with the images in a list column. It takes the next listed image."""
    import datasets
    from PIL import Image

    img = Image.open(folder / "ok.png").convert("RGB")
    msgs = [{"role": "user", "content": [{"type": "image", "text": None}, {"type": "text", "text": "What?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "red"}]}]
    datasets.Dataset.from_list([{"images": [img], "messages": msgs}] * 2 + [{"images": [], "messages": msgs}]) \
        .save_to_disk(str(folder / "trl"))
    rs = load_records(str(folder / "trl"), _cfg().data, "train")
    assert len(rs.records) == 2 and rs.skipped == {"placeholder mismatch": 1}  # the empty list: no image
    part = rs.records[0].messages[0]["content"][0]
    assert part["type"] == "image" and (part.get("bytes") or part.get("image") is not None)


def test_parquet_image_column_of_raw_bytes_is_an_image(folder):
    import pyarrow as pa
    import pyarrow.parquet as pq

    png = (folder / "ok.png").read_bytes()
    pq.write_table(pa.Table.from_pylist([{"image": png, "question": "q", "answer": "a"},
                                         {"image": b"not an image", "question": "q", "answer": "b"}]),
                   folder / "b.parquet")
    rs = load_records(str(folder / "b.parquet"), _cfg("data.format=vqa").data, "train")
    assert [r.media_parts()[0]["bytes"][:4] for r in rs.records] == [png[:4], b"not "]
    scan = scan_records(rs, Encoder(*tiny_processor("tiny/qwen2-vl"), _cfg("data.format=vqa")), "skip")
    assert len(scan.records.records) == 1 and scan.records.skipped == {"corrupt media": 1}


def test_validation_never_reads_test(folder):
    for split in ("train", "test"):
        _jsonl(folder / f"{split}.jsonl", [GOOD])
    with pytest.raises(DataError, match="no 'validation' split") as e:
        load_records(f"{folder}::validation", _cfg().data, "train")
    assert "test.jsonl, train.jsonl" in e.value.fix
    _jsonl(folder / "dev.jsonl", [GOOD, GOOD])  # dev means validation: an alias
    assert len(load_records(f"{folder}::validation", _cfg().data, "train").records) == 2


def test_dataset_info_with_a_misspelt_media_column_is_refused_per_record(folder):
    _jsonl(folder / "s.jsonl", [GOOD, GOOD])
    (folder / "dataset_info.json").write_text(json.dumps({
        "s": {"file_name": "s.jsonl", "formatting": "sharegpt", "columns": {"messages": "conversations",
                                                                             "images": "image_list"}},
        "typed": {"file_name": "s.jsonl", "formatting": "sharegpt", "tags": ["from"]}}))
    d = _cfg(f"data.dataset_info={folder / 'dataset_info.json'}").data
    with pytest.raises(DataError, match="no usable records") as e:
        load_records("s", d, "train")
    assert "placeholder mismatch" in e.value.what
    with pytest.raises(DataError, match="tags is a list"):
        load_records("typed", d, "train")


@pytest.mark.parametrize("key, value", [("train.max_steps", "true"), ("train.lr", "true"), ("data.max_length", "false"),
                                        ("train.micro_batch_size", "true")])
def test_booleans_are_no_numbers(key, value):
    with pytest.raises(ConfigError, match=f"{key}: {value} is a boolean"):
        load_config(None, ["model.name=tiny/qwen2-vl", "data.train=synthetic:counting", f"{key}={value}"])


def test_yaml_alias_bomb_is_refused_at_once(tmp_path):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [f"{c}: &{c} [{', '.join(['*' + p] * 9)}]"
                                                     for p, c in zip("abcdefgh", "bcdefghi")]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\noutput_dir: out\nmodel: {name: tiny/qwen2-vl}\ndata: {train: synthetic:counting}\n"
                    "train: {aux_losses: [{name: heatmap, weight: 1, options: {grid: *i}}]}\n")
    with pytest.raises(ConfigError, match="expands to more than 100,000 values"):
        load_config(path)
    # aliases that stay small are YAML as usual
    path.write_text("base: &b {name: tiny/qwen2-vl}\n")
    ok = tmp_path / "ok.yaml"
    ok.write_text("output_dir: out\nmodel: &m {name: tiny/qwen2-vl}\ndata: {train: synthetic:counting}\n")
    assert load_config(ok).model.name == "tiny/qwen2-vl"


def test_a_corrupt_image_in_a_list_column_is_one_bad_record(folder):
    """datasets decodes List(Image) columns itself while iterating: one corrupt image stopped the split
    with PIL's exception. Read undecoded, it is that record's `corrupt media`."""
    import datasets

    msgs = [{"role": "user", "content": [{"type": "image", "text": None}, {"type": "text", "text": "What?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "red"}]}]
    feats = datasets.Features({"images": datasets.List(datasets.Image()),
                               "messages": datasets.Dataset.from_list([{"messages": msgs}]).features["messages"]})
    rows = [{"images": [{"bytes": b, "path": None}], "messages": msgs}
            for b in (b"garbage", (folder / "ok.png").read_bytes())]
    datasets.Dataset.from_list(rows, features=feats).save_to_disk(str(folder / "ds"))
    rs = load_records(str(folder / "ds"), _cfg().data, "train")
    assert len(rs.records) == 2  # both read; the corrupt one is found where media are checked
    scan = scan_records(rs, Encoder(*tiny_processor("tiny/qwen2-vl"), _cfg()), "skip")
    assert len(scan.records.records) == 1 and scan.records.skipped == {"corrupt media": 1}
    assert scan.records.problems[0][0].endswith("ds:row 0")
