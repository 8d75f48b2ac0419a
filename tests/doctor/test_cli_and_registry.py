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

    # the list of failure modes lives in the repository (docs/failure_modes.md): a missing file fails here
    n_modes = len(re.findall(r"^\d+\. \*\*", (ROOT / "docs" / "failure_modes.md").read_text(), flags=re.M))
    assert n_modes >= 24
    covered = {c.failure_mode for c in all_checks() if c.failure_mode}
    assert covered == set(range(1, n_modes + 1))


def test_docs_list_every_code_once():
    from mmtune.doctor.registry import all_checks

    doc = (ROOT / "docs" / "doctor.md").read_text()
    listed = re.findall(r"^\| (MM\d{3}) \|", doc, flags=re.M)
    assert sorted(listed) == sorted([c.code for c in all_checks()] + ["MM098", "MM099"])


def test_fast_subset_builds_no_model(tmp_path):
    """(How long it takes is measured by benchmarks/quick_paths.py, not asserted on a shared machine.)"""
    from mmtune.doctor.runner import run_doctor

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": "synthetic:counting"}}))
    rep = run_doctor(cfg, [], "t4", fast=True)
    assert "MM005" in rep.codes("info")  # bf16 default on a T4: the run's fp16 decision, said
    assert not any(c in rep.codes() for c in ("MM010", "MM011", "MM017"))


def _table_rows(text: str, header: str) -> dict[str, list[str]]:
    """{code: [cells after the code]} of the markdown table that starts with `header`."""
    start = text.index(header)
    rows = {}
    for line in text[start:].split("\n\n", 1)[0].splitlines()[2:]:
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        rows[cells[0]] = cells[1:]
    return rows


def test_readme_check_table_mirrors_the_registry():
    """README.md's table lists every registered check (plus the runner's MM098/MM099) with the registry's
    fast flag and failure mode, each title starting with the registry's title (detail may follow)."""
    from mmtune.doctor.registry import RUNNER_CODES, all_checks

    rows = _table_rows((ROOT / "README.md").read_text(), "| code | fast | failure mode | checks that |")
    checks = all_checks()
    assert sorted(rows) == sorted([c.code for c in checks] + list(RUNNER_CODES))
    for c in checks:
        fast, mode, title = rows[c.code]
        assert (fast, mode) == ("yes" if c.fast else "", str(c.failure_mode or "")), c.code
        assert title.startswith(c.title), (c.code, title, c.title)


def test_doctor_doc_main_table_has_the_registrys_fast_flags_and_failure_modes():
    from mmtune.doctor.registry import all_checks

    rows = _table_rows((ROOT / "docs" / "doctor.md").read_text(), "| code | fast | failure mode | checks that |")
    for c in all_checks():
        if c.code in rows:
            assert rows[c.code][:2] == ["yes" if c.fast else "", str(c.failure_mode or "")], c.code


def test_limit_reads_the_first_rows_and_says_so(tmp_path):
    """`--limit N` (docs/doctor.md, docs/data.md) reads N rows per split, labels the table, and draws no
    conclusion about the split's size from them (MM031); it refuses --write-clean, whose file would lack the rest."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"name": "tiny/qwen2-vl"}, "output_dir": str(tmp_path / "run"),
                                   "data": {"train": "synthetic:counting", "synthetic_train_size": 40},
                                   "train": {"micro_batch_size": 8}}))
    res = CliRunner().invoke(_app(), ["doctor", str(cfg), "--limit", "3", "--json"])
    data = json.loads(res.output)
    assert "MM031" not in {f["code"] for f in data["findings"]}, data["findings"]
    from mmtune.doctor.runner import run_doctor

    rows = run_doctor(cfg, [], None, max_records=3, only=["MM031"]).tables["data"].table_rows()
    assert rows[0][:3] == ("train (first 3 rows: --limit)", 3, 3)
    res = CliRunner().invoke(_app(), ["doctor", str(cfg), "--limit", "3", "--write-clean", str(tmp_path / "c.jsonl")])
    assert res.exit_code == 2 and "--write-clean" in res.output and not (tmp_path / "c.jsonl").exists()
