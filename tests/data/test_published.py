"""Public datasets read in their published layouts (ChartQA, InfoVQA, OCR-VQA, FSC147), from the
look-alikes recipes/data/make_published.py writes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mmtune.config.schema import DataConfig
from mmtune.data.sources import load_records
from mmtune.errors import DataError

SCRIPT = Path(__file__).resolve().parents[2] / "recipes" / "data" / "make_published.py"


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("make_published", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path_factory.mktemp("published")
    mod.main(out)
    return out


def test_chartqa_root_reads_both_parts_of_each_split_with_png_images(published):
    root = published / "chartqa" / "ChartQA Dataset"
    human = json.loads((root / "train" / "train_human.json").read_text())
    aug = json.loads((root / "train" / "train_augmented.json").read_text())
    rs = load_records(str(root), DataConfig(format="chartqa"), "train")
    assert len(rs) == len(human) + len(aug)
    by_q = {(Path(r.messages[0]["content"][0]["path"]).name, r.messages[0]["content"][1]["text"]): r.answer_text()
            for r in rs}
    for row in human + aug:
        assert by_q[(row["imgname"], row["query"])] == row["label"]
    assert all("/train/png/" in r.messages[0]["content"][0]["path"] for r in rs)
    # `val` (not `validation`) is ChartQA's eval split; `test` is its own.
    val = load_records(str(root), DataConfig(format="chartqa"), "eval")
    assert all("/val/png/" in r.messages[0]["content"][0]["path"] for r in val)
    assert len(load_records(f"{root}::test", DataConfig(format="chartqa"), "train")) == 2 * 2


def test_chartqa_parts_select_human_or_augmented(published):
    from mmtune.data.one_source import load_source

    root = str(published / "chartqa" / "ChartQA Dataset")
    human = load_source(root, DataConfig(format="chartqa"), "train", parts=["human"])
    assert len(human) == 6 and all(r.messages[0]["content"][1]["text"].startswith("Which colour") for r in human)


def test_infovqa_reads_the_published_wrapper_and_keeps_every_answer(published):
    rs = load_records(str(published / "infovqa"), DataConfig(format="infovqa"), "train")
    data = json.loads((published / "infovqa" / "infographicsVQA_train_v1.0.json").read_text())["data"]
    assert [r.id for r in rs] == [str(d["questionId"]) for d in data]
    assert rs[0].references == data[0]["answers"] and rs[0].answer_text() == data[0]["answers"][0]
    assert rs[0].messages[0]["content"][0]["path"].endswith(f"infographicsvqa_images/{data[0]['image_local_name']}")
    assert len(load_records(str(published / "infovqa"), DataConfig(format="infovqa"), "val")) == 3


def test_infovqa_query_spelling_and_missing_answers_are_named(published, tmp_path):
    f = tmp_path / "q.json"
    img = next((published / "infovqa" / "infographicsvqa_images").iterdir())
    f.write_text(json.dumps([{"questionId": 1, "query": "what?", "image": str(img), "answers": ["x", "y"]}]))
    assert load_records(str(f), DataConfig(format="infovqa"))[0].references == ["x", "y"]
    # The published test split has no answers: an error naming the record, not a KeyError.
    with pytest.raises(DataError) as e:
        load_records(str(published / "infovqa"), DataConfig(format="infovqa"), "test")
    assert "answers" in e.value.what and "infographicsVQA_test_v1.0.json" in e.value.where


def test_ocrvqa_dataset_json_expands_questions_per_split_and_counts(published):
    f = published / "ocrvqa" / "dataset.json"
    data = json.loads(f.read_text())
    for split, code in (("train", 1), ("eval", 2), ("test", 3)):
        rs = load_records(str(f), DataConfig(format="ocrvqa"), split)
        entries = {k: v for k, v in data.items() if v["split"] == code}
        assert len(rs) == sum(len(v["questions"]) for v in entries.values())
        assert f"{len(entries)} OCR-VQA images expanded to {len(rs)} question/answer samples" in " ".join(rs.notes)
        r = rs[1]
        key, k = r.id.split("#")
        assert r.answer_text() == entries[key]["answers"][int(k)]
        assert r.messages[0]["content"][0]["path"].endswith(f"images/{key}.jpg")


def test_fsc147_reads_annotations_splits_and_classes_with_templates(published):
    root = published / "fsc147"
    ann = json.loads((root / "annotation_FSC147_384.json").read_text())
    splits = json.loads((root / "Train_Test_Val_FSC_147.json").read_text())
    classes = dict(line.split("\t") for line in (root / "ImageClasses_FSC147.txt").read_text().splitlines())
    rs = load_records(str(root), DataConfig(format="fsc147"), "train")
    assert [r.id for r in rs] == splits["train"]
    r = rs[0]
    assert r.answer_text() == f"COUNT: {len(ann[r.id]['points'])}"
    assert classes[r.id] in r.messages[0]["content"][1]["text"]
    cfg = DataConfig(format="fsc147", answer_template="There are {count} {object}.", question_template="Count the {object}.")
    r = load_records(str(root), cfg, "val")[0]
    assert r.answer_text() == f"There are {len(ann[r.id]['points'])} {classes[r.id]}."
    assert r.messages[0]["content"][1]["text"] == f"Count the {classes[r.id]}."


def test_fsc147_bad_template_is_a_config_error():
    from mmtune.errors import ConfigError

    with pytest.raises((ConfigError, ValueError)) as e:
        DataConfig(format="fsc147", answer_template="COUNT: {n}")
    assert "{n}" in str(e.value) and "count" in str(e.value)
