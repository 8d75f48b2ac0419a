"""Every malformed record, of every format, is a counted skip under data.on_bad_record=skip and a
DataError naming file, line and reason under error -- never a traceback from inside a library, never
a hang, never a wrong type silently turned into text."""

import json

import pytest

from mmtune.config import load_config
from mmtune.data.encode import Encoder
from mmtune.data.inspect import scan_records
from mmtune.data.sources import load_records
from mmtune.errors import DataError, MMTuneError

from .malformed import GOOD, cases, fuzz_lines, tiny_processor, write_media

CASES = cases()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad")
    write_media(folder)
    cfg_path = folder / "cfg.yaml"
    cfg_path.write_text("output_dir: out\nmodel: {name: tiny/qwen2-vl}\ndata: {train: x, max_length: 512}\n")
    processor = tiny_processor("tiny/qwen2-vl")

    def load(fmt, lines, policy):
        f = folder / f"{fmt}.jsonl"
        f.write_bytes(b"\n".join(lines) + b"\n")
        cfg = load_config(cfg_path, [f"data.format={fmt}", f"data.train={f}", f"data.on_bad_record={policy}"])
        return scan_records(load_records(str(f), cfg.data, "train"), Encoder(*processor, cfg), policy).records, f

    return load


@pytest.mark.parametrize("fmt, line, what", CASES, ids=[c[2] for c in CASES])
def test_each_malformed_record_is_skipped_and_counted_or_an_error_with_file_and_line(env, fmt, line, what):
    good = json.dumps(GOOD[fmt]).encode()
    kept, _ = env(fmt, [good, line], "skip")
    assert kept.n_skipped == 1, (kept.skipped, what)
    assert len(kept.records) == (2 if fmt == "ocrvqa" else 1)
    assert kept.problems[0][0].endswith(":2")
    with pytest.raises(DataError) as e:
        env(fmt, [good, line], "error")
    assert e.value.where.split(" ")[0].endswith(f"{fmt}.jsonl:2") and e.value.fix


@pytest.mark.parametrize("what, reason", [
    ("invalid UTF-8", "bad encoding"), ("deeply nested JSON", "bad json"), ("deeply nested objects", "bad json"),
    ("assistant before any user turn", "bad conversation"), ("non-string answer part", "bad type"),
    ("bytes as a string", "bad type"), ("image key: a number", "bad type"),
    ("image key: a string that is not a file", "missing media"), ("decompression bomb PNG", "image too large"),
    ("named pipe as media", "not a regular file"), ("pipe as video", "not a regular file"),
    ("device as image", "not a regular file"),
    ("object answer", "bad type"), ("bool answer", "bad type"), ("text file named .png", "corrupt media"),
])
def test_reasons_name_what_is_wrong(env, what, reason):
    fmt, line, _ = next(c for c in CASES if c[2] == what)
    kept, _ = env(fmt, [json.dumps(GOOD[fmt]).encode(), line], "skip")
    assert kept.skipped == {reason: 1}


def test_numbers_are_text_but_other_types_are_not(env):
    kept, _ = env("vqa", [json.dumps({"image": "ok.png", "question": "How many?", "answer": 3}).encode(),
                          json.dumps({"image": "ok.png", "question": "q", "answer": ["3", {"a": 1}]}).encode()], "skip")
    assert [r.answer_text() for r in kept.records] == ["3"] and kept.skipped == {"bad type": 1}


def test_fuzzed_records_of_every_format_give_no_traceback(env):
    """300 random mutations (types swapped, fields dropped, turns reordered, bytes flipped): each loads
    or is a counted skip / a DataError; the benchmark runs >= 1,000 (benchmarks/reliability.py)."""
    for fmt in GOOD:
        lines = fuzz_lines(fmt, 60, seed=7)
        kept, _ = env(fmt, lines, "skip")
        assert len(kept.records) + kept.n_skipped >= len(lines)
        for line in lines[:15]:
            try:
                env(fmt, [line], "error")
            except MMTuneError:
                pass


def test_audio_from_a_named_pipe_is_refused_not_waited_on(tmp_path):
    import os

    from mmtune.data.formats import BadRecord
    from mmtune.data.media import load_audio

    os.mkfifo(tmp_path / "a.wav")
    with pytest.raises(BadRecord, match="not a regular file") as e:
        load_audio({"type": "audio", "path": str(tmp_path / "a.wav")}, "x.jsonl:3")
    assert e.value.reason == "not a regular file" and e.value.where == "x.jsonl:3"
