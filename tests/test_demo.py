"""The README's demo, run as a user runs it: it must clearly beat the best constant answer."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_demo_counting_beats_the_constant_baseline(tmp_path):
    out = tmp_path / "demo"
    cmd = [sys.executable, "-m", "mmtune.cli", "train", str(ROOT / "recipes" / "demo_counting.yaml"), f"output_dir={out}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=ROOT,
                       env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    ev, base = s["eval"], s["baseline"]
    assert ev["exact_match"] >= 2 * base["exact_match"], (ev, base)
    assert ev["mae"] < base["mae"], (ev, base)
    assert s["peak_memory_bytes"] > 0 and s["tokens_per_s"] > 0 and s["wall_s"] > 0
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))  # TensorBoard is on by default
    assert (out / "best").resolve().name.startswith("checkpoint-")  # best by exact_match kept
