"""Run folders -> report.html + plots/*.svg. One run: the report goes into its folder; several runs:
one page comparing them (each chart has a line per run)."""

from __future__ import annotations

import datetime
import re
from html import escape
from pathlib import Path

from rich.markup import escape as escape_markup

from ..console import console
from .collect import RunData, eval_records_by_id, read_run
from .svg import bar_chart, line_chart

SAMPLE = 12  # predictions shown per run
TITLES = {"loss": "training loss (a run mixing modalities: a line per modality too)", "lr": "learning rate",
          "grad_norm": "gradient norm (before clipping)",
          "tokens_per_s": "tokens / s",
          "rewards": "DPO rewards (beta x log-ratio to the reference), margins, accuracy",
          "reward": "GRPO reward: the weighted sum, each function's mean and std",
          "reward_std": "GRPO reward std (the weighted sum)", "completion_length": "GRPO completion length (new tokens)",
          "kl": "GRPO KL to the reference", "clip_ratio": "GRPO clipped share of completion tokens"}

CSS = """
body{font-family:sans-serif;margin:24px;max-width:1000px;color:#222}
h1{font-size:22px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
.charts{display:flex;flex-wrap:wrap;gap:10px} table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
.dim{color:#888;font-size:12px} .ok{color:#2a2} .bad{color:#c22} img{margin:2px;border:1px solid #ccc}
.strip{display:inline-block;white-space:nowrap} pre{font-size:11px;background:#f6f6f6;padding:8px;overflow:auto}
"""


def _series(runs: list[RunData], part: str) -> dict[str, dict[str, list]]:
    """metric -> {line label -> points}. Eval keys like `exact_match/chartqa` (per data source) become
    one chart per metric with a line per run and source; so do `loss/image` (train) and `eval_loss/image` (per
    modality, a run mixing them): a line per modality in the loss's chart."""
    out: dict[str, dict[str, list]] = {}
    for run in runs:
        for key, pts in getattr(run, part).items():
            metric, _, source = key.partition("/")
            label = " · ".join(x for x in (run.name if len(runs) > 1 else "", source) if x) or run.name
            out.setdefault(metric, {})[label] = pts
    return out


def _gib(n) -> float | None:
    return None if n is None else n / 2**30


def _memory_svg(run: RunData) -> tuple[str, str]:
    s = run.summary
    kind = s.get("peak_memory_kind") or "measured"
    bars = [("planned peak allocated", _gib(s.get("predicted_peak_bytes"))),
            (f"measured peak ({'CUDA allocated' if 'cuda' in kind else 'process RSS'})", _gib(s.get("peak_memory_bytes"))),
            ("planned peak reserved", _gib(s.get("predicted_peak_reserved_bytes"))),
            ("measured peak reserved", _gib(s.get("peak_memory_reserved_bytes")))]
    note = ""
    if s.get("predicted_peak_bytes") is None:
        note = "no memory plan was made (no target GPU: train.gpu unset and no CUDA device)"
    elif "cuda" not in kind:
        note = "measured on the CPU (process RSS), not comparable with the GPU plan"
    title = f"peak memory, GiB{' — ' + run.name if run.name else ''}"
    return bar_chart(title, bars, " GiB"), note


def _match(pred: str, refs: list[str]) -> bool:
    norm = [str(r).strip().lower() for r in refs]
    return str(pred).strip().lower() in norm


def _predictions_html(run: RunData) -> str:
    if not run.predictions:
        return '<p class="dim">no predictions (eval.generate off, or no eval set)</p>'
    from .media import media_html

    records = eval_records_by_id(run)
    rows = run.predictions[:SAMPLE]
    step = rows[0].get("step")
    html = [f'<p class="dim">{len(rows)} of {len(run.predictions)} eval records at step {step}</p>',
            "<table><tr><th>record</th><th>media</th><th>prompt</th><th>prediction</th><th>reference(s)</th></tr>"]
    for p in rows:
        rec = records.get(p.get("id"))
        media = media_html(rec) if rec is not None else ""
        prompt = ""
        if rec is not None:
            from ..data.records import content_parts, part_text

            users = [m for m in rec.messages if m.get("role") == "user"]
            prompt = part_text(content_parts(users[-1]["content"])) if users else ""
        ok = _match(p.get("prediction", ""), p.get("references", []))
        html.append(f"<tr><td>{escape(str(p.get('id')))}</td><td>{media}</td><td>{escape(prompt)}</td>"
                    f"<td class=\"{'ok' if ok else 'bad'}\">{escape(str(p.get('prediction')))}</td>"
                    f"<td>{escape(' | '.join(map(str, p.get('references', []))))}</td></tr>")
    html.append("</table>")
    return "".join(html)


def _summary_table(runs: list[RunData]) -> str:
    head = "".join(f"<th>{escape(r.name)}</th>" for r in runs)
    rows = [("folder", lambda r: str(r.path)),
            ("steps", lambda r: r.summary.get("steps", "(not finished)")),
            ("wall time", lambda r: f"{r.summary['wall_s']:.0f} s" if "wall_s" in r.summary else ""),
            ("tokens / s", lambda r: f"{r.summary['tokens_per_s']:,.0f}" if "tokens_per_s" in r.summary else ""),
            ("data wait", _data_wait),
            ("final eval", lambda r: ", ".join(f"{k}={v:.4g}" for k, v in (r.summary.get("eval") or {}).items()
                                               if isinstance(v, (int, float)))),
            ("best-constant baseline", lambda r: ", ".join(f"{k}={v:.4g}" for k, v in (r.summary.get("baseline") or {}).items()
                                                           if isinstance(v, (int, float)))),
            ("best checkpoint", lambda r: (r.summary.get("best") or {}).get("path") or ""),
            ("train records", lambda r: r.summary.get("train_records", ""))]
    body = "".join(f"<tr><th>{k}</th>" + "".join(f"<td>{escape(str(f(r)))}</td>" for r in runs) + "</tr>"
                   for k, f in rows)
    return f"<table><tr><th></th>{head}</tr>{body}</table>"


def _data_wait(r: RunData) -> str:
    """The share of step time spent waiting for micro-batches, with the first step (workers starting, the
    first encodes) apart from the steady state after it (summaries of older runs lack the split)."""
    s = r.summary
    if "data_wait_fraction" not in s:
        return ""
    text = f"{100 * s['data_wait_fraction']:.1f} % of step time"
    if "data_wait_first_step_s" in s:
        text += (f" (first step {s['data_wait_first_step_s']:.2f} s; after it "
                 f"{100 * s['data_wait_fraction_after_first_step']:.1f} %)")
    return text


def _slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "_", text).strip("_") or "plot"


def render(runs: list[RunData], plots_dir: Path | None = None) -> str:
    """The page. With `plots_dir`, each chart is also written there as NAME.svg."""
    charts: list[tuple[str, str, str]] = []  # (section, name, svg)
    for metric, series in _series(runs, "train").items():
        charts.append(("train", metric, line_chart(TITLES.get(metric, metric), series)))
    for metric, series in _series(runs, "eval").items():
        charts.append(("eval", f"eval_{metric}", line_chart(f"eval: {metric}", series)))
    mem_notes = []
    for run in runs:
        svg, note = _memory_svg(run)
        charts.append(("memory", f"memory_{run.name}" if len(runs) > 1 else "memory", svg))
        if note:
            mem_notes.append(f"{run.name}: {note}")
        for split, key in (("", "skipped_records"), ("eval", "skipped_eval_records")):
            skipped = run.summary.get(key) or {}
            if skipped:
                name = "_".join(x for x in ("skipped", split, run.name if len(runs) > 1 else "") if x)
                title = " ".join(x for x in ("skipped", split, "records by reason —", run.name) if x)
                charts.append(("skipped", name, bar_chart(title, sorted(skipped.items()))))
    if plots_dir is not None:
        plots_dir.mkdir(parents=True, exist_ok=True)
        for _, name, svg in charts:
            if svg:
                (plots_dir / f"{_slug(name)}.svg").write_text(svg, encoding="utf-8")

    def section(key: str) -> str:
        svgs = [svg for k, _, svg in charts if k == key and svg]
        return f'<div class="charts">{"".join(svgs)}</div>' if svgs else '<p class="dim">nothing logged</p>'

    title = "mmtune run report — " + ", ".join(r.name for r in runs)
    written = datetime.datetime.now().isoformat(timespec="seconds")
    parts = [(f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
              f"<style>{CSS}</style></head><body><h1>{escape(title)}</h1>"),
             (f'<p class="dim">written {written} from the run folder\'s metrics.jsonl, summary.json, '
              "predictions.jsonl and config.resolved.yaml</p>"),
             _summary_table(runs), "<h2>Training</h2>", section("train"),
             "<h2>Evaluation</h2>", section("eval"),
             "<h2>Memory: planned vs measured</h2>", section("memory"),
             "".join(f'<p class="dim">{escape(n)}</p>' for n in mem_notes)]
    parts.append("<h2>Skipped records</h2>")
    if any(r.summary.get("skipped_records") or r.summary.get("skipped_eval_records") for r in runs):
        parts.append(section("skipped"))
    else:
        parts.append('<p class="dim">none: every record was used</p>')
    for run in runs:
        suffix = f" — {escape(run.name)}" if len(runs) > 1 else ""
        decisions = run.summary.get("decisions") or []
        parts.append(f"<h2>Decisions and their reasons{suffix}</h2>")
        parts.append("<ul>" + "".join(f"<li>{escape(str(d))}</li>" for d in decisions) + "</ul>" if decisions
                     else '<p class="dim">none recorded</p>')
        if run.config_text:
            parts.append(f"<details><summary>config.resolved.yaml</summary><pre>{escape(run.config_text)}</pre></details>")
        parts.append(f"<h2>Predictions next to references{suffix}</h2>")
        parts.append(_predictions_html(run))
        for problem in run.problems:
            parts.append(f'<p class="dim">note: {escape(problem)}</p>')
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(run_dirs: list[str | Path], out: str | Path | None = None) -> Path:
    """Write the report; returns the HTML path. Default place: RUN/report.html for one run,
    ./mmtune-report.html for several. Plots go beside it in `plots/` (or `<stem>_plots/`)."""
    runs = [read_run(p) for p in run_dirs]
    if len({r.name for r in runs}) < len(runs):  # runs/a/run and runs/b/run: tell them apart by path
        for r in runs:
            r.name = str(r.path)
    if out is None:
        out = runs[0].path / "report.html" if len(runs) == 1 else Path("mmtune-report.html")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plots = out.parent / ("plots" if out.name == "report.html" else f"{out.stem}_plots")
    out.write_text(render(runs, plots), encoding="utf-8")
    for r in runs:  # said on the terminal too, not only inside the page
        for problem in r.problems:
            console.print(f"[yellow]warning:[/] {escape_markup(problem)}")
    return out


def write_report_quietly(run_dir: str | Path) -> Path | None:
    """The end-of-run report. A report that cannot be drawn must not turn a finished training into a
    failed one: the error is printed and the run's own files stand."""
    try:
        return write_report([run_dir])
    except Exception as e:  # noqa: BLE001 - isolated on purpose: the run's results are already on disk
        console.print(f"[yellow]warning:[/] report.html not written ({type(e).__name__}: {e}); "
                      f"try `mmtune report {run_dir}`")
        return None


def next_steps(run_dir: str | Path) -> str:
    """The one line a finished run ends with: where everything is and what to run next."""
    d = Path(run_dir)
    best = d / "best"
    ckpt = f"best -> {best.resolve().name}" if best.exists() else "checkpoints"
    return (f"everything is in {d}/ (report.html, summary.json, metrics.jsonl, {ckpt}); next: "
            f"mmtune chat {d}  |  mmtune report {d}  |  mmtune export {d} --merge")
