"""The bounded load test in CI: benchmarks/serve_load.py itself, small (32 requests, 16 at a time, one repeat),
against two real `mmtune serve` processes. Correctness only, never timing: every request answered, the
batched server used fewer generate calls than requests, and the results file says what produced it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_load_script_runs_and_batches(tmp_path):
    out = tmp_path / "load.json"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "serve_load.py"), "--requests", "32",
                          "--concurrency", "16", "--max-tokens", "4", "--repeats", "1", "--out", str(out)],
                         capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    report = json.loads(out.read_text())
    assert len(report["commit"]) == 40 and "serve_load.py" in report["command"]
    batched, single = report["results"]["batched"], report["results"]["one_by_one"]
    for r in (batched, single):
        assert r["ok"] == 32 and r["errors"] == 0 and r["completion_tokens"] == 32 * 4  # ignore_eos: exactly 4 each
        lat = r["latency_s"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert single["server"]["batches"] == 33 and single["server"]["largest_batch"] == 1  # 32 + the warm-up
    assert batched["server"]["batches"] < 33 and batched["server"]["largest_batch"] > 1
