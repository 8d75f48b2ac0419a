"""benchmarks/published_runs.py: its table of published GPU runs is well formed, and a row plans through it.

Not an accuracy test (the published figures are GPU runs of other pipelines; docs/plan.md reports them):
the YAML's rows carry what the script needs, the Qwen1 model config is the one the rows describe, and one
row runs end to end through `mmtune.plan.predict` (decoder cut to 2 layers) into the JSON/text files.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mmtune.models.configs import embedded

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "published_runs.py"


def _module():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import published_runs
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return published_runs


def test_runs_yaml_rows_are_complete_and_sourced():
    pr = _module()
    spec = pr.load_runs()
    rows = spec["rows"]
    assert len(rows) >= 46
    for row in rows:
        src = spec["sources"][row["source"]]
        assert (row.get("url") or src["url"]).startswith("https://github.com/"), row["id"]
        assert row["published"] > 0 and row["seq"] > 0 and row["quote"].strip(), row["id"]
        # a config in the YAML or an embedded public config (by hub id or alias): nothing is downloaded
        assert row["model"] in spec["models"] or embedded(row["model"]) is not None, row["id"]
        assert (row.get("record_tokens") or row["seq"]) <= row["seq"], row["id"]
    groups = {r["group"] for r in rows}
    assert {"swift1-lora", "swift1-full", "qwen-readme-lora", "qwen-readme-lora-1.8b", "qwen-readme-lora-14b",
            "swift3-mm", "swift3-llm-packed", "torchtune-full"} <= groups
    # Qwen-7B's config.json as a Qwen2 layer for layer: 4096 hidden, 32 layers of 32 full heads (no GQA),
    # SwiGLU 11008 (Qwen1's intermediate_size 22016 split over w1/w2), 151,936 words, untied head.
    q = spec["models"]["qwen-7b-chat"]["config"]
    assert (q["hidden_size"], q["num_hidden_layers"], q["num_attention_heads"], q["num_key_value_heads"],
            q["intermediate_size"], q["vocab_size"], q["tie_word_embeddings"]) == (4096, 32, 32, 32, 11008, 151936, False)
    # Qwen-1.8B / Qwen-14B the same way (w1/w2 halves of intermediate_size 11008 / 27392), and
    # Llama-3.2-3B's config.json: 28 layers of 24 heads (8 key/value), hidden 3072, SwiGLU 8192, tied head.
    shape = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
             "vocab_size", "tie_word_embeddings")
    cfgs = {name: tuple(spec["models"][name]["config"][k] for k in shape)
            for name in ("qwen-1.8b-chat", "qwen-14b-chat", "llama-3.2-3b-instruct")}
    assert cfgs == {"qwen-1.8b-chat": (2048, 24, 16, 16, 5504, 151936, False),
                    "qwen-14b-chat": (5120, 40, 40, 40, 13696, 152064, False),
                    "llama-3.2-3b-instruct": (3072, 28, 24, 8, 8192, 128256, True)}


def test_held_out_rows_are_summarised_apart():
    """Rows marked held_out (collected after the planner was tuned) never enter "all" or the plain kinds: they
    have their own "all held-out" line and "held-out <kind>" lines."""
    pr = _module()
    spec = pr.load_runs()
    held = [r for r in spec["rows"] if r.get("held_out")]
    assert len(held) >= 15 and all(r["group"].startswith("heldout-") for r in held)
    res = [{"group": "g", "bound": False, "held_out": False, "error_pct": 10.0, "kinds": ["LoRA (16-bit)"]},
           {"group": "h", "bound": False, "held_out": True, "error_pct": -20.0, "kinds": ["LoRA (16-bit)"]},
           {"group": "h", "bound": False, "held_out": True, "error_pct": 30.0, "kinds": ["full fine-tuning"]}]
    lines = {s["group"]: s for s in pr.summarise(res)}
    assert lines["all"]["rows"] == 1 and lines["all"]["mean_abs_error_pct"] == 10.0
    assert lines["all held-out"]["rows"] == 2 and lines["all held-out"]["mean_abs_error_pct"] == 25.0
    kinds = {s["group"]: s for s in pr.summarise(res, by="kinds")}
    assert kinds["LoRA (16-bit)"]["rows"] == 1 and kinds["held-out LoRA (16-bit)"]["mean_signed_error_pct"] == -20.0
    assert "full fine-tuning" not in kinds and kinds["held-out full fine-tuning"]["rows"] == 1


def test_load_runs_reports_every_bad_row(tmp_path):
    pr = _module()
    bad = tmp_path / "runs.yaml"
    bad.write_text("sources: {s: {url: https://github.com/x}}\nrows:\n"
                   "  - {id: a, group: g, source: s, model: m, method: lora, seq: 8, quote: q, published: 1,"
                   " measures: max_memory_allocated}\n"
                   "  - {id: a, group: g, source: nowhere, model: m, method: lora, seq: 8, quote: q, published: 1,"
                   " measures: unstated, unit: MB}\n"
                   "  - {id: c, group: g, source: s}\n")
    with pytest.raises(ValueError) as e:
        pr.load_runs(bad)
    msg = str(e.value)
    assert "row 0 (a): measures 'max_memory_allocated'" in msg and "row 1 (a): unknown source 'nowhere'" in msg
    assert "row 1 (a): unit 'MB'" in msg and "row 1 (a): duplicate id" in msg and "row 2 (c): missing model" in msg


def test_one_row_runs_through_the_script(tmp_path):
    out = tmp_path / "published"
    p = subprocess.run([sys.executable, str(SCRIPT), "--only", "swift1-full-512", "--only", "torchtune-3b-full-packed",
                        "--layers", "2", "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")})
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    row, tt = data["rows"]
    assert data["layers"] == 2 and row["id"] == "swift1-full-512" and row["compared_with"] == "peak_reserved_bytes"
    assert row["tokens"] == 512 and row["planned_gib"] == row["peak_reserved_gib"] > 0
    assert row["alloc_conf"] == "expandable_segments:False"  # measured under torch's default allocator
    assert row["error_pct"] == pytest.approx(100 * (row["planned_gib"] - 73.37) / 73.37, abs=0.01)
    # torchtune's "Peak Memory Active" is compared with the planned peak allocated, on a Llama model whose
    # config the YAML carries, packed into two rows of 4,096 tokens
    assert tt["id"] == "torchtune-3b-full-packed" and tt["compared_with"] == "peak_allocated_bytes"
    assert tt["planned_gib"] == tt["peak_allocated_gib"] > 0 and tt["tokens"] == 4096
    assert [s["group"] for s in data["summary"]] == ["swift1-full", "torchtune-full", "all"]
    assert "swift1-full-512" in out.with_suffix(".txt").read_text()


def test_oom_rows_are_bounds_not_errors():
    """An out-of-memory report's figure is a floor under the run's peak (allocated + tried-to-allocate, or the
    card): the row is "held" when the plan reaches it and "violated" when the plan is below what the run is known
    to have needed; it carries no signed error, so it never enters a summary line."""
    pr = _module()
    assert pr.oom_verdict(30.0, 23.69, plan_fits=False) == {"held": True, "plan_fits": False, "below_bound_pct": 0.0}
    v = pr.oom_verdict(20.0, 25.0, plan_fits=True)
    assert v == {"held": False, "plan_fits": True, "below_bound_pct": 20.0}
    res = [{"group": "g", "bound": False, "held_out": True, "error_pct": 5.0, "kinds": ["LoRA (16-bit)"]},
           {"group": "heldout-oom-reports", "bound": False, "held_out": True, "oom_bound": v, "kinds": ["LoRA (16-bit)"]}]
    assert {s["group"] for s in pr.summarise(res)} == {"g", "all held-out"}
    assert {s["group"]: s["rows"] for s in pr.summarise(res, by="kinds")} == {"held-out LoRA (16-bit)": 1, "all held-out": 1}
    assert pr.oom_summary(res) == {"rows": 1, "bound_held": 0, "plan_says_does_not_fit": 0}
    spec = pr.load_runs()
    oom = [r for r in spec["rows"] if r["measures"] == "oom_lower_bound"]
    assert len(oom) >= 9 and all(r.get("held_out") and r.get("gpu") and r.get("url") for r in oom)
    assert {r.get("bound_on", "process_total") for r in oom} <= set(pr.BOUND_ON)


def test_load_runs_rejects_an_unknown_bound(tmp_path):
    pr = _module()
    bad = tmp_path / "runs.yaml"
    bad.write_text("sources: {s: {url: https://github.com/x}}\nrows:\n"
                   "  - {id: a, group: g, source: s, model: m, method: lora, seq: 8, quote: q, published: 1,"
                   " measures: oom_lower_bound, bound_on: free}\n")
    with pytest.raises(ValueError, match="bound_on 'free'"):
        pr.load_runs(bad)
