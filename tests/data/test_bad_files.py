"""Whole files that are wrong (or unusual) in one way, read the way `mmtune data inspect`, the doctor and
training read them: a counted skip naming file:line, or one error saying what, where and the fix --
never a traceback, never records dropped without a count, never pixels silently wrong."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from mmtune.cli import app
from mmtune.config import load_config
from mmtune.data.encode import Encoder
from mmtune.data.inspect import scan_records
from mmtune.data.sources import load_records
from mmtune.errors import DataError

from .bad_files import write_all
from .malformed import tiny_processor


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_all(tmp_path_factory.mktemp("bad_files"))


@pytest.fixture(scope="module")
def processors():
    return {m: tiny_processor(m) for m in ("tiny/qwen2-vl", "tiny/qwen2-audio")}


def _config(path, fmt: str, model: str, policy: str = "skip"):
    folder = path.parent
    cfg = folder / f"cfg_{path.stem}.yaml"
    cfg.write_text(f"output_dir: {folder / 'out'}\nmodel: {{name: {model}}}\n"
                   f"data: {{train: '{path}', format: {fmt}, on_bad_record: {policy}}}\n")
    return cfg


def _scan(files, processors, name, fmt, model, policy="skip"):
    path = files[name]
    cfg = load_config(_config(path, fmt, model, policy), [])
    rs = load_records(str(path), cfg.data, "train")
    return scan_records(rs, Encoder(*processors[model], cfg), policy).records


# (file, data.format, model, records kept, {reason: skipped}, where the first skip is, words of its message)
COUNTED = [
    ("bom.jsonl", "messages", "tiny/qwen2-vl", 3, {}, None, None),
    ("bom.json", "messages", "tiny/qwen2-vl", 3, {}, None, None),
    ("bom.csv", "vqa", "tiny/qwen2-vl", 3, {}, None, None),
    ("latin1.csv", "vqa", "tiny/qwen2-vl", 2, {"bad encoding": 1}, "latin1.csv:3", "not valid UTF-8 (byte 0xe9"),
    ("counting_bad.jsonl", "fsc147", "tiny/qwen2-vl", 2, {"bad count": 3}, "counting_bad.jsonl:2", "count is nan"),
    ("duplicate_ids.jsonl", "messages", "tiny/qwen2-vl", 5, {}, None, None),
    ("records:grey16.png", "messages", "tiny/qwen2-vl", 3, {}, None, None),
    ("records:palette.png", "messages", "tiny/qwen2-vl", 3, {}, None, None),
    ("records:cmyk.jpg", "messages", "tiny/qwen2-vl", 3, {}, None, None),
    ("records:grey_alpha.png", "messages", "tiny/qwen2-vl", 3, {}, None, None),
    ("records:a_folder.png", "messages", "tiny/qwen2-vl", 2, {"not a regular file": 1}, ".jsonl:3", "is a folder"),
    ("records:zero_samples.wav", "messages", "tiny/qwen2-audio", 2, {"corrupt media": 1}, ".jsonl:3", "no samples"),
    ("records:truncated.wav", "messages", "tiny/qwen2-audio", 2, {"corrupt media": 1}, ".jsonl:3", "truncated.wav"),
]


@pytest.mark.parametrize("name, fmt, model, kept, skipped, where, words", COUNTED, ids=[c[0] for c in COUNTED])
def test_bad_or_unusual_file_is_read_with_every_skip_counted_and_named(files, processors, name, fmt, model, kept,
                                                                      skipped, where, words):
    rs = _scan(files, processors, name, fmt, model)
    assert len(rs.records) == kept and rs.skipped == skipped, (rs.skipped, rs.problems)
    if where:
        source, detail = rs.problems[0]
        assert source.split(" ")[0].endswith(where) and words in detail, rs.problems
        # With data.on_bad_record=error (the default) the same record stops the run with file:line and a fix.
        with pytest.raises(DataError) as e:
            _scan(files, processors, name, fmt, model, policy="error")
        assert e.value.where.split(" ")[0].endswith(where) and e.value.fix


# (file, data.format, what the error says, the fix's words)
REFUSED = [
    ("scalar.json", "messages", "holds a number at its top level, not a list of records", "list of record objects"),
    ("string.json", "messages", "holds a string at its top level", "list of record objects"),
    ("null.json", "messages", "holds a null at its top level", "list of record objects"),
    ("truncated.parquet", "messages", "is not a readable parquet file", "truncated or corrupt"),
    ("garbage.parquet", "messages", "is not a readable parquet file", "truncated or corrupt"),
    ("empty.jsonl", "messages", "no usable records", "check the file"),
]


@pytest.mark.parametrize("name, fmt, what, fix", REFUSED, ids=[c[0] for c in REFUSED])
def test_unreadable_file_is_one_error_naming_it_with_a_fix(files, name, fmt, what, fix):
    path = files[name]
    r = CliRunner().invoke(app, ["data", "inspect", str(_config(path, fmt, "tiny/qwen2-vl")), "--examples", "0"])
    assert r.exit_code == 2, r.output
    assert not r.exception or isinstance(r.exception, SystemExit), r.exception
    out = " ".join(r.output.split())  # rich wraps long lines
    assert what in out and f"where: {path}" in out and fix in out, out


def test_data_inspect_reports_counts_and_first_bad_rows_on_the_terminal(files):
    path = files["latin1.csv"]
    r = CliRunner().invoke(app, ["data", "inspect", str(_config(path, "vqa", "tiny/qwen2-vl")), "--examples", "0"])
    out = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert "2 ok, 1 bad encoding" in out and f"bad {path}:3: row is not valid UTF-8" in out


def test_repeated_record_ids_are_noted_with_where(files, processors):
    rs = _scan(files, processors, "duplicate_ids.jsonl", "messages", "tiny/qwen2-vl")
    [note] = [n for n in rs.notes if "repeat an id" in n]
    assert note.startswith("2 record(s) repeat an id already used") and "duplicate_ids.jsonl:3 repeats id 'a'" in note


def test_unusual_pixel_formats_keep_their_picture(files):
    """16-bit greyscale used to be clipped by PIL's convert to almost all white; palette, CMYK and grey+alpha
    convert to the colours they show, transparency onto white."""
    from mmtune.data.media import load_image

    def rgb(name):
        return np.asarray(load_image({"type": "image", "path": str(files[name])}), dtype=np.float64)

    grey = rgb("grey16.png")
    assert grey.shape == (32, 32, 3) and 100 < grey.mean() < 155 and (grey == 255).mean() < 0.05
    assert rgb("grey16.png")[0, 0, 0] == 0 and rgb("grey16.png")[-1, -1, 0] == 255  # the ramp's ends
    cmyk = rgb("cmyk.jpg")[16, 16]
    assert cmyk[0] > 200 and cmyk[1] < 60 and cmyk[2] < 60  # (0, 255, 255, 0) CMYK is red
    # Both are fully transparent (palette index 0 is the transparent colour; grey 128 at alpha 0): shown on white,
    # as the model's processor shows the same file (transformers' convert_to_rgb), not as the colour stored under it.
    from PIL import Image
    from transformers.image_transforms import convert_to_rgb

    for name in ("palette.png", "grey_alpha.png"):
        with Image.open(files[name]) as raw:
            assert (rgb(name) == convert_to_rgb(raw, return_numpy=True)).all() and rgb(name).min() == 255, name


def test_doctor_counts_bad_rows_and_names_unreadable_files(files):
    from mmtune.doctor.runner import run_doctor

    rep = run_doctor(_config(files["counting_bad.jsonl"], "fsc147", "tiny/qwen2-vl"), ["train.micro_batch_size=1"], None)
    assert rep.tables["data"].table_rows()[:2] == [("train", 5, 2, 3, ""), ("", "", "", 3, "bad count")]
    assert "MM099" not in rep.codes()
    rep = run_doctor(_config(files["duplicate_ids.jsonl"], "messages", "tiny/qwen2-vl"), [], None, only=["MM068"])
    [f] = rep.findings
    assert f.severity == "info" and f.message.startswith("train: 2 record(s) repeat the id of an earlier record")
    assert f.where.startswith(f"{files['duplicate_ids.jsonl']}:3")
    rep = run_doctor(_config(files["truncated.parquet"], "messages", "tiny/qwen2-vl"), [], None)
    [f] = [f for f in rep.findings if f.severity == "error"]
    assert "not a readable parquet file" in f.message and str(files["truncated.parquet"]) in f.where
    assert "MM099" not in rep.codes()


def test_a_short_training_run_counts_and_names_what_it_skipped(files, tmp_path):
    """`mmtune train` on a counting file with bad counts, data.on_bad_record=skip: the start summary names the
    first skipped records with file:line, summary.json counts them for the train and the eval split."""
    import json

    path = files["counting_bad.jsonl"]
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"output_dir: {tmp_path / 'run'}\nmodel: {{name: tiny/qwen2-vl, gradient_checkpointing: false}}\n"
                   f"data: {{train: '{path}', eval: '{path}', format: fsc147, on_bad_record: skip, max_length: 256}}\n"
                   "adapter: {method: lora, r: 4}\n"
                   "train: {max_steps: 1, micro_batch_size: 1, device: cpu, precision: fp32, warmup_steps: 0}\n"
                   "eval: {metrics: [exact_match, mae], max_new_tokens: 2, batch_size: 2}\nlogging: {tensorboard: false}\n")
    r = CliRunner().invoke(app, ["train", str(cfg)])
    out = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert f"skipped train {path}:2: count is nan" in out and f"{path}:3: count is -2" in out, out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["skipped_records"] == {"bad count": 3} and summary["skipped_eval_records"] == {"bad count": 3}
