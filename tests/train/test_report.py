"""The run report: written at the end of every run, and on demand for one or several run folders."""

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from mmtune.cli import app


def _train(config: Path, *overrides: str) -> str:
    res = CliRunner().invoke(app, ["train", str(config), "--skip-checks", *overrides])
    assert res.exit_code == 0, res.output
    return res.output


def test_a_run_ends_with_its_report_and_the_next_commands(tiny_vl_config, tmp_path):
    cfg = tiny_vl_config(eval={"every": 2})
    out = _train(cfg)
    run = tmp_path / "run"
    # The last line says where everything is and what to run next.
    last = " ".join(out.strip().splitlines()[-3:])
    for cmd in (f"mmtune chat {run}", f"mmtune report {run}", f"mmtune export {run}"):
        assert cmd in last, last
    html = (run / "report.html").read_text()
    # Self-contained: nothing is fetched (no src/href to files or the network), images are inline.
    assert not re.search(r'(src|href)="(?!data:)', html)
    assert "<script" not in html
    # Curves of the run's own numbers: each chart has a path, and the loss chart spans the logged steps.
    for name in ("loss", "lr", "grad_norm", "tokens_per_s", "eval_exact_match", "eval_eval_loss", "memory"):
        svg = (run / "plots" / f"{name}.svg").read_text()
        assert svg in html
    assert "<path" in (run / "plots" / "loss.svg").read_text()
    # Predictions next to references, with the record's image as an inline thumbnail.
    preds = [json.loads(x) for x in (run / "predictions.jsonl").read_text().splitlines()]
    last_step = max(p["step"] for p in preds)
    for p in (p for p in preds if p["step"] == last_step):
        assert f"<td>{p['id']}</td>" in html
    assert html.count("data:image/png;base64,") >= 4  # eval_max_samples=4, one image each
    # Decisions and the resolved config are on the page.
    summary = json.loads((run / "summary.json").read_text())
    assert summary["decisions"] and all(d.split(":")[0] in html for d in summary["decisions"])
    assert "config.resolved.yaml" in html
    # The data wait, with the first step apart from the steady state.
    assert (f"<th>data wait</th><td>{100 * summary['data_wait_fraction']:.1f} % of step time (first step "
            f"{summary['data_wait_first_step_s']:.2f} s; after it") in html


def test_report_compares_runs_and_shows_skips_and_memory(tiny_vl_config, tmp_path):
    from mmtune.report import write_report

    cfg = tiny_vl_config(train={"max_steps": 2})
    _train(cfg, f"output_dir={tmp_path / 'a'}")
    _train(cfg, f"output_dir={tmp_path / 'b'}", "train.lr=0.01")
    # What a GPU run's summary holds (a plan and CUDA peaks) and a skip count: the report draws them.
    s = json.loads((tmp_path / "b" / "summary.json").read_text())
    s.update(predicted_peak_bytes=3 * 2**30, peak_memory_bytes=2.5 * 2**30, peak_memory_kind="cuda_max_memory_allocated",
             skipped_records={"missing media": 3, "too long": 1})
    (tmp_path / "b" / "summary.json").write_text(json.dumps(s))
    with open(tmp_path / "b" / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "step": 3, "loss": ')  # a line cut by a kill
    out = tmp_path / "cmp" / "both.html"
    res = CliRunner().invoke(app, ["report", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    loss = (tmp_path / "cmp" / "both_plots" / "loss.svg").read_text()
    assert loss.count("<path") == 2 and ">a<" in loss and ">b<" in loss  # a line per run, labelled
    mem = (tmp_path / "cmp" / "both_plots" / "memory_b.svg").read_text()
    assert "planned peak allocated" in mem and ">3 GiB<" in mem and ">2.5 GiB<" in mem
    skipped = (tmp_path / "cmp" / "both_plots" / "skipped_b.svg").read_text()
    assert "missing media" in skipped and ">3<" in skipped
    assert "metrics.jsonl:" in html and "not valid JSON" in html  # the cut line is named, not fatal
    # Two runs with the same folder name are told apart by their paths.
    (tmp_path / "x").mkdir()
    (tmp_path / "b").rename(tmp_path / "x" / "a")
    html = write_report([tmp_path / "a", tmp_path / "x" / "a"], tmp_path / "same.html").read_text()
    loss = (tmp_path / "same_plots" / "loss.svg").read_text()
    assert loss.count("<path") == 2 and f">{tmp_path / 'x' / 'a'}<" in loss


def test_report_of_a_folder_that_is_not_a_run_says_so(tmp_path):
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2
    assert "not a run folder" in res.output or "no metrics.jsonl" in res.output


def test_per_source_metrics_video_frames_and_audio_players(tmp_path):
    """A run folder as the loop writes it, for a video+audio eval set with two data sources."""
    import numpy as np
    import soundfile as sf
    import yaml
    from PIL import Image

    from mmtune.report import write_report

    data = tmp_path / "data"
    (data / "clip").mkdir(parents=True)
    for k in range(6):
        Image.new("RGB", (48, 32), (40 * k, 90, 90)).save(data / "clip" / f"{k}.png")
    sf.write(data / "say.wav", np.zeros(1600, dtype="float32"), 16000)
    (data / "eval.jsonl").write_text(json.dumps({"id": "r0", "messages": [
        {"role": "user", "content": [{"type": "video", "path": "clip"}, {"type": "audio", "path": "say.wav"},
                                     {"type": "text", "text": "What happens?"}]},
        {"role": "assistant", "content": "a ball rolls"}]}) + "\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.resolved.yaml").write_text(yaml.safe_dump(
        {"output_dir": str(run), "model": {"name": "tiny/qwen2.5-omni"},
         "data": {"train": str(data / "eval.jsonl"), "eval": str(data / "eval.jsonl")}}))
    rows = [{"kind": "train", "step": s, "loss": 2.0 / s, "lr": 1e-4, "grad_norm": 1.0, "tokens_per_s": 100.0}
            for s in range(1, 5)]
    rows += [{"kind": "eval", "step": s, "exact_match/chartqa": 0.1 * s, "exact_match/infovqa": 0.2 * s}
             for s in (2, 4)]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (run / "predictions.jsonl").write_text(json.dumps({"step": 4, "id": "r0", "prediction": "a ball rolls",
                                                       "references": ["a ball rolls"]}) + "\n")
    html = write_report([run]).read_text()
    em = (run / "plots" / "eval_exact_match.svg").read_text()
    assert em.count("<path") == 2 and ">chartqa<" in em and ">infovqa<" in em  # a line per data source
    strip = re.search(r'<span class="strip">(.*?)</span>', html).group(1)
    assert strip.count("data:image/png;base64,") == 4  # four frames of the clip
    assert '<audio controls src="data:audio/wav;base64,' in html
    assert 'class="ok">a ball rolls<' in html and "What happens?" in html
