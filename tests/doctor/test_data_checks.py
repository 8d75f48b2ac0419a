"""Data checks: a JSONL with one broken record per failure mode; each is found, with file:line."""

from __future__ import annotations

import json

import pytest
from doctor_helpers import TINY_VL


def _msg(text, answer="3"):
    return [{"role": "user", "content": text}, {"role": "assistant", "content": answer}]


@pytest.fixture
def dataset(tmp_path):
    import numpy as np
    import soundfile as sf
    from PIL import Image

    Image.new("RGB", (64, 48), "white").save(tmp_path / "ok.png")
    Image.new("RGB", (640, 480), "white").save(tmp_path / "big.png")
    (tmp_path / "corrupt.png").write_bytes(b"not a png at all")
    sf.write(tmp_path / "a.wav", np.zeros(1600, dtype="float32"), 16000)
    rows = {
        "ok": {"messages": _msg("<image>How many circles?"), "images": ["ok.png"]},
        "big": {"messages": _msg("<image>How many?"), "images": ["big.png"]},
        "ok_text": {"messages": _msg("Say three.")},
        "missing_field": {"msgs": _msg("hi")},
        "missing_media": {"messages": _msg("<image>How many?"), "images": ["nope.png"]},
        "corrupt_media": {"messages": _msg("<image>How many?"), "images": ["corrupt.png"]},
        # Two tags, one image (a list without any tag is ms-swift's layout: the image goes first).
        "placeholder": {"messages": _msg("<image><image>How many?"), "images": ["ok.png"]},
        "audio": {"messages": _msg("<audio>What was said?"), "audios": ["a.wav"]},
    }

    def write(names, path="train.jsonl"):
        with open(tmp_path / path, "w") as f:
            f.writelines(json.dumps(rows[n]) + "\n" for n in names)
        return str(tmp_path / path)

    return write


def _tree(train, **data):
    return {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": train, "format": "messages", **data}}


DATA_CODES = ("MM014", "MM016", "MM017", "MM018", "MM033", "MM031")


def test_clean_data_is_silent(doctor, dataset):
    rep = doctor(_tree(dataset(["ok", "ok_text"] * 3)), *DATA_CODES)
    assert rep.errors == [] and rep.codes("warning") == set()
    scan = rep.tables["data"].splits[0]
    assert (scan.ok, scan.n_bad) == (6, 0)
    assert set(scan.signatures) == {"image", "text"}


@pytest.mark.parametrize("bad,code,reason", [
    ("missing_field", "MM014", "missing field"),
    ("missing_media", "MM018", "missing media"),
    ("corrupt_media", "MM018", "corrupt media"),
    ("placeholder", "MM016", "placeholder mismatch"),
    ("audio", "MM033", "unsupported modality"),
])
def test_each_broken_record_is_found(doctor, dataset, bad, code, reason):
    path = dataset(["ok", bad, "ok"])
    rep = doctor(_tree(path), *DATA_CODES)
    assert rep.codes("error") == {code}, rep.findings
    f = rep.errors[0]
    assert f.where.startswith(f"{path}:2"), f.where  # file:line of the broken record
    assert rep.tables["data"].splits[0].bad == {reason: 1}
    # with the skip policy the same record is a warning (skipped and counted), not an error
    rep = doctor(_tree(path, on_bad_record="skip"), *DATA_CODES)
    assert rep.errors == [] and code in rep.codes("warning")


def test_mm017_media_cut_by_truncation(doctor, dataset):
    rep = doctor(_tree(dataset(["big"]), max_length=12), "MM017")
    bad = rep.tables["data"].splits[0].bad
    assert bad == {"too long": 1}, rep.tables["data"].splits[0].examples
    assert "media" in rep.errors[0].message
    assert "data.max_length=" in rep.errors[0].fix
    assert doctor(_tree(dataset(["big", "ok_text"]), max_length=64), "MM017").errors == []


def test_mm017_answer_cut(doctor, dataset):
    rep = doctor(_tree(dataset(["ok_text"]), max_length=12), "MM017")
    assert rep.tables["data"].splits[0].bad == {"too long": 1}
    assert "(0 of them media)" in rep.errors[0].message


def test_token_lengths_match_the_encoder(dataset):
    """The scan's lengths are the encoder's: the same records give the same totals as encoding them."""
    from mmtune.config.loader import validate
    from mmtune.data.encode import Encoder
    from mmtune.data.sources import load_records
    from mmtune.doctor.datascan import scan_dataset
    from mmtune.resolve import local_target, resolve_run

    resolved = resolve_run(validate(_tree(dataset(["ok", "ok_text"]))), local_target("cpu"))
    scan = scan_dataset(resolved).splits[0]
    enc = Encoder.for_run(resolved)
    encoded = [enc.encode(r)["input_ids"].numel() for r in load_records(resolved.cfg.data.train, resolved.cfg.data).records]
    assert list(scan.lengths) == encoded


def test_write_clean_keeps_only_passing_rows(doctor, dataset, tmp_path):
    out = tmp_path / "clean.jsonl"
    rep = doctor(_tree(dataset(["ok", "missing_media", "ok_text", "corrupt_media"])), "MM034", "MM018",
                 write_clean=str(out))
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 2 and all("nope.png" not in json.dumps(x) for x in lines)
    assert any(f.code == "MM034" and "wrote 2" in f.message for f in rep.findings)
    # the clean file passes
    rep = doctor(_tree(str(out), media_root=str(tmp_path)), *DATA_CODES)
    assert rep.errors == []


def test_mm031_fewer_records_than_a_micro_batch(doctor, dataset):
    tree = _tree(dataset(["ok"]))
    tree["train"] = {"micro_batch_size": 4}
    assert "MM031" in doctor(tree, "MM031").codes("error")
    tree["train"] = {"micro_batch_size": 1, "max_steps": 10}
    assert doctor(tree, "MM031").findings == []


def test_mm002_unbounded_pixels_warns(doctor):
    from mmtune.doctor.checks.data import media_tokens

    rep = doctor({**TINY_VL, "data": {"train": "synthetic:counting", "synthetic_train_size": 4, "max_length": 16}},
                 "MM002")
    assert "MM002" in rep.codes("warning") and rep.findings[0].fix.startswith("model.max_pixels=")
    rep = doctor({**TINY_VL, "model": {"name": "tiny/qwen2-vl", "max_pixels": 3136},
                  "data": {"train": "synthetic:counting", "synthetic_train_size": 4, "max_length": 16}}, "MM002")
    assert rep.codes("warning") == set()
    assert media_tokens  # the check function is importable on its own


def test_mm080_mixed_media_under_sharded_weights(doctor, dataset):
    """fsdp / zero3 with text-only and image records: the loop keeps the towers in step (info); a run
    whose records never hold an image alone cannot be kept in step (error); ddp needs nothing."""
    mixed = dataset(["ok", "ok_text"] * 3)
    rep = doctor({**_tree(mixed), "train": {"strategy": "zero3"}}, "MM080")
    assert rep.codes("info") == {"MM080"} and rep.errors == []
    assert "3 image, 3 text" in rep.findings[0].message and "tower_rows_added" in rep.findings[0].message
    assert doctor({**_tree(mixed), "train": {"strategy": "ddp"}}, "MM080").findings == []
    same = dataset(["ok"] * 4, "same.jsonl")
    assert doctor({**_tree(same), "train": {"strategy": "fsdp"}}, "MM080").findings == []


def test_a_bad_first_record_is_a_data_finding_not_a_crash(doctor, tmp_path, dataset):
    """An image Qwen2-VL's processor rejects (aspect ratio 1093:5 > 200) as the first record: MM018 says
    so with file:line; MM020 builds its batch from the records the scan passed instead of crashing."""
    from PIL import Image

    Image.new("RGB", (1093, 5), "white").save(tmp_path / "wide.png")
    path = tmp_path / "wide.jsonl"
    rows = [{"messages": _msg("<image>How many?"), "images": ["wide.png"]},
            {"messages": _msg("<image>How many?"), "images": ["ok.png"]}]
    dataset(["ok"])  # writes ok.png
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = doctor(_tree(str(path)), "MM018", "MM020")
    assert not any(f.code == "MM099" for f in rep.findings), rep.findings
    (f,) = rep.errors
    assert f.code == "MM018" and "aspect ratio" in f.message and f.where.startswith(f"{path}:1")
    assert "MM020" not in {c for c, _, _ in rep.not_run}


def test_not_run_reasons_are_said_once(doctor):
    from mmtune.doctor.cli import group_not_run

    not_run = [("MM001", "a", "no target GPU"), ("MM003", "b", "no target GPU"), ("MM008", "c", "on meta")]
    assert group_not_run(not_run) == [("no target GPU", [("MM001", "a"), ("MM003", "b")]), ("on meta", [("MM008", "c")])]


def test_every_bad_reason_gets_a_finding(doctor, tmp_path):
    """A record refused for a reason outside the original table ('bad conversation': the assistant speaks
    first) is a finding, not only a row of the data table."""
    path = tmp_path / "roles.jsonl"
    rows = [{"messages": _msg("Say three.")},
            {"messages": [{"role": "assistant", "content": "3"}, {"role": "user", "content": "Say three."},
                          {"role": "assistant", "content": "3"}]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = doctor(_tree(str(path)), *DATA_CODES)
    assert rep.tables["data"].splits[0].bad == {"bad conversation": 1}
    (f,) = rep.errors
    assert f.code == "MM014" and "assistant turn comes before" in f.message and f.where.startswith(f"{path}:2")


def test_reason_table_covers_the_data_package():
    """Every BadRecord reason the data package raises maps to a check (grep of the source)."""
    import re
    from pathlib import Path

    import mmtune.data as data_pkg
    from mmtune.doctor.datascan import REASON_CODES

    reasons = set()
    for f in Path(data_pkg.__file__).parent.glob("*.py"):
        reasons |= set(re.findall(r'BadRecord\("([a-z ]+)"', f.read_text()))
    assert reasons and reasons <= set(REASON_CODES), reasons - set(REASON_CODES)


def test_streaming_data_pass_reads_only_the_first_k_rows(doctor, dataset):
    """data.streaming: the doctor samples the stream's first data.stream_sample rows and says so."""
    rep = doctor(_tree(dataset(["ok", "ok_text"] * 5 + ["missing_field"]), streaming=True, stream_sample=4,
                       on_bad_record="skip"), *DATA_CODES)
    scan = rep.tables["data"].splits[0]
    assert (scan.rows, scan.ok, scan.n_bad, scan.sampled) == (4, 4, 0, 4)  # the bad 11th row is past the sample
    assert rep.tables["data"].table_rows()[0][0] == "train (first 4 rows: data.streaming)"
