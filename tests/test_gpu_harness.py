"""benchmarks/gpu/run.py (issue #12's harness) end to end on this CPU with the tiny twins: one row of each
subcommand runs through the same code a GPU runs, the JSON rows carry what #12 asks, a second call skips what
is measured, rows needing a missing package or CUDA are skipped with the reason, and a CPU run never writes
into benchmarks/results."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "benchmarks" / "gpu" / "run.py"
ROWS = ["paths/seed001_qwen2.5-7b_lora/base", "paths/seed001_qwen2.5-7b_lora/fa2",
        "planner/text/qwen2.5-7b/lora/s512/b8/nockpt", "throughput/ours/0", "throughput/plain/0"]


def _harness(*args, out):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    # no time budget: a loaded machine must not turn into a test failure (the budget logic is not timed here)
    return subprocess.run([sys.executable, str(RUN), *args, "--device", "cpu", "--tiny", "--out", str(out),
                           "--budget-s", "100000"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)


@pytest.mark.slow
def test_one_row_of_each_subcommand_on_the_tiny_twins(tmp_path):
    p = _harness("--steps", "3", "--repeats", "1", "--only", ",".join(ROWS), out=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert not list(tmp_path.glob("gpu_*.json"))  # a CPU run's files are never named like a GPU's
    paths = json.loads((tmp_path / "cpu_tiny_paths.json").read_text())
    assert paths["environment"]["device"] == "CPU" and "torch" in paths["environment"]["versions"]
    assert set(paths["environment"]["optional"]) >= {"bitsandbytes", "flash-attn", "liger-kernel", "trl"}
    rows = {r["id"]: r for r in paths["rows"]}
    base = rows[ROWS[0]]
    assert base["status"] == "pass", base
    assert base["steps"] == 3 and len(base["losses"]) == 3 and all(math.isfinite(x) for x in base["losses"])
    assert base["losses_finite"] and base["seconds"] > 0 and "model.weights=random" in base["mmtune_command"]
    assert any(d.startswith("model.weights: random") for d in base["decisions"])
    assert base["command"].startswith("python benchmarks/gpu/run.py paths --only " + ROWS[0])
    assert rows[ROWS[1]]["status"] == "skipped" and "CUDA" in rows[ROWS[1]]["reason"]

    planner = json.loads((tmp_path / "cpu_tiny_planner.json").read_text())
    (row,) = planner["rows"]
    assert row["status"] == "pass", row
    assert row["predicted"]["peak_allocated_bytes"] > 0 and row["measured"]["peak_allocated_bytes"] > 0
    assert len(row["measured"]["step_times_s"]) == 3 and row["error_pct"]["peak_allocated"] is not None
    assert row["mmtune_command"].startswith("mmtune plan recipes/seed001_qwen2.5-7b_lora.yaml")

    tp = json.loads((tmp_path / "cpu_tiny_throughput.json").read_text())
    assert {r["id"]: r["status"] for r in tp["rows"]} == {"throughput/ours/0": "pass", "throughput/plain/0": "pass"}
    assert all(r["tokens_per_s"] > 0 and "--variant" in r["variant_command"] for r in tp["rows"])
    assert tp["summary"]["ratio_ours_over"]["plain"]["tokens_per_s"] > 0

    # resumable: a second call measures nothing again
    again = _harness("--steps", "3", "--repeats", "1", "--only", ",".join(ROWS), out=tmp_path)
    assert again.returncode == 0 and "run   " not in again.stdout, again.stdout
    assert json.loads((tmp_path / "cpu_tiny_paths.json").read_text())["rows"][0]["measured_at"] == base["measured_at"]


def test_dry_run_lists_rows_and_a_cpu_run_refuses_benchmarks_results(tmp_path):
    p = _harness("--dry-run", out=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "== paths:" in p.stdout and "== planner: 34 rows" in p.stdout and "== throughput:" in p.stdout
    assert "paths/seed004_llava_clip_stage1/base" in p.stdout and "estimated:" in p.stdout
    assert not list(tmp_path.iterdir())  # a dry run writes nothing
    refused = _harness("planner", "--only", "nothing", out=ROOT / "benchmarks" / "results")
    assert refused.returncode != 0 and "does not write into benchmarks/results" in refused.stderr


def test_results_file_is_resumable_and_rows_merge_their_overrides(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    try:
        from results import ResultsFile
        from rows import merged
    finally:
        sys.path.remove(str(ROOT / "benchmarks" / "gpu"))
    f = ResultsFile(tmp_path / "r.json", {"device": "X"}, mirror=tmp_path / "out")
    f.put({"id": "a", "status": "pass"})
    f.put({"id": "b", "status": "skipped"})
    assert (tmp_path / "out" / "r.json").read_text() == (tmp_path / "r.json").read_text()  # --mirror: the same file
    g = ResultsFile(tmp_path / "r.json", {"device": "X"})
    assert g.done("a") and not g.done("b") and not g.done("c")  # a skip is checked again next time
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(SystemExit, match="another --out"):
        ResultsFile(tmp_path / "r.json", {"device": "Y"})  # rows of two devices never mix
    assert merged(["a=1", "b=2", "a=3"]) == ["a=3", "b=2"]
