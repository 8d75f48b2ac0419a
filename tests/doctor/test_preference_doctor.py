"""The doctor on preference pairs: MM083 (no rejected side, a malformed side, a side with media of its own)
and MM084 (chosen equal to rejected), each naming the first pair's file:line."""

from __future__ import annotations

import json

import yaml
from PIL import Image


def _doctor(tmp_path, rows, *, objective="dpo", fmt="preference", skip=False):
    from mmtune.doctor.runner import run_doctor

    Image.new("RGB", (56, 56), (10, 10, 200)).save(tmp_path / "a.png")
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"name": "tiny/qwen2-vl"}, "output_dir": str(tmp_path / "run"),
        "data": {"train": str(tmp_path / "p.jsonl"), "format": fmt, "on_bad_record": "skip" if skip else "error"},
        "train": {"objective": objective}}))
    return run_doctor(cfg, [], None, only=["MM083", "MM084"])


def _pair(prompt, chosen, rejected, **kw):
    return {"images": ["a.png"], "prompt": "<image>" + prompt, "chosen": chosen, "rejected": rejected, **kw}


def test_equal_sides_and_media_in_an_answer_are_found(tmp_path):
    rows = [_pair("How many?", "3", "4"), _pair("Colour?", "blue", "blue"),
            _pair("Shape?", "square", [{"role": "assistant", "content": [{"type": "image", "path": "a.png"},
                                                                          {"type": "text", "text": "circle"}]}])]
    rep = _doctor(tmp_path, rows, skip=True)
    by = {f.code: f for f in rep.findings}
    assert by["MM084"].severity == "warning" and by["MM084"].where.startswith(str(tmp_path / "p.jsonl") + ":2")
    assert "1 preference pair(s)" in by["MM084"].message
    assert by["MM083"].severity == "warning" and "pair media differ" in by["MM083"].message
    assert str(by["MM083"].where).endswith("p.jsonl:3")


def test_sft_records_under_dpo_are_an_error_naming_the_record(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}]
    rep = _doctor(tmp_path, rows, fmt="messages")
    (f,) = [f for f in rep.findings if f.code == "MM083"]
    assert f.severity == "error" and "no rejected answer" in f.message and "p.jsonl:1" in str(f.where)


def test_clean_pairs_are_silent(tmp_path):
    rep = _doctor(tmp_path, [_pair("How many?", "3", "4")])
    assert not [f for f in rep.findings if f.code in ("MM083", "MM084")]
