"""The command (text and JSON, exit codes, no traceback), the registry's coverage, and docs/doctor.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import typer
import yaml
from typer.testing import CliRunner

from mmtune.doctor.cli import register

ROOT = Path(__file__).resolve().parents[2]


def _app():
    app = typer.Typer()

    @app.callback()
    def main():  # a group, as in the real `mmtune` app
        pass

    register(app)
    return app


def test_json_output_and_exit_code_for_an_invalid_config(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"name": "tiny/qwen2-vl", "attn_implemntation": "sdpa"}}))
    res = CliRunner().invoke(_app(), ["doctor", str(cfg), "--json", "--fast"])
    assert res.exit_code == 1, res.output
    data = json.loads(res.output)
    f = next(x for x in data["findings"] if x["code"] == "MM019")
    assert set(f) == {"code", "severity", "message", "where", "fix"}
    assert "attn_implementation" in f["fix"]
    assert "Traceback" not in res.output


def test_text_output_grouped_and_exit_zero_when_clean(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": "synthetic:counting"},
                                   "output_dir": str(tmp_path / "run")}))
    res = CliRunner().invoke(_app(), ["doctor", str(cfg), "--fast", "--gpu", "a100-80gb"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(_app(), ["doctor", str(cfg), "model.attn_implementation=flash_attention_2", "--fast",
                                      "--gpu", "t4"])
    assert res.exit_code == 1 and "errors (1)" in res.output and "MM025" in res.output


def test_every_failure_mode_has_a_check():
    from mmtune.doctor.registry import all_checks

    text = (ROOT.parent / "shared" / "FAILURE_MODES.md")
    n_modes = len(re.findall(r"^\d+\. \*\*", text.read_text(), flags=re.M)) if text.is_file() else 24
    covered = {c.failure_mode for c in all_checks() if c.failure_mode}
    assert covered == set(range(1, n_modes + 1))


def test_docs_list_every_code_once():
    from mmtune.doctor.registry import all_checks

    doc = (ROOT / "docs" / "doctor.md").read_text()
    listed = re.findall(r"^\| (MM\d{3}) \|", doc, flags=re.M)
    assert sorted(listed) == sorted(c.code for c in all_checks()) + ["MM098", "MM099"]


def test_fast_subset_is_fast_and_builds_no_model(tmp_path):
    import time

    from mmtune.doctor.runner import run_doctor

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": "synthetic:counting"}}))
    t0 = time.perf_counter()
    rep = run_doctor(cfg, [], "t4", fast=True)
    assert time.perf_counter() - t0 < 5
    assert "MM005" in rep.codes("info")  # bf16 default on a T4: the run's fp16 decision, said
    assert not any(c in rep.codes() for c in ("MM010", "MM011", "MM017"))
