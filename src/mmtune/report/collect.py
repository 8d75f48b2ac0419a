"""A run folder -> the numbers a report shows. Missing files give empty parts, never an error:
a run stopped early still has a report of what it did."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import MMTuneError

# train.objective=dpo adds its rewards (one chart, a line each: chosen, rejected, margins, accuracies);
# grpo its reward (one chart: the weighted sum and a line per reward function, `reward/<name>` and its std),
# reward_std, completion length, KL and clipped share
TRAIN_SERIES = ("loss", "lr", "grad_norm", "tokens_per_s", "rewards/chosen", "rewards/rejected", "rewards/margins",
                "rewards/accuracies", "reward", "reward_std", "completion_length", "kl", "clip_ratio")
# grpo: one key per reward function the run names; a run mixing modalities: `loss/<modality>` (drawn as lines of the
# loss chart, train/step.py; their `answer_tokens/<modality>` are for the identity, not charted)
TRAIN_PREFIXES = ("reward/", "loss/")


@dataclass
class RunData:
    path: Path
    name: str
    train: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # series -> [(step, value)]
    eval: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    predictions: list[dict] = field(default_factory=list)  # the last eval's rows
    config_text: str = ""
    problems: list[str] = field(default_factory=list)  # lines of metrics.jsonl that could not be read


def _number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def _jsonl(path: Path, problems: list[str]) -> list[dict]:
    """The rows of a JSONL log; a line cut by a kill mid-write is named and left out, the rest used."""
    if not path.exists():
        return []
    rows, bad = [], []
    for n, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            row = None
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad.append(n)
    if bad:  # counted, the first few named: a damaged log never hides how much of it was left out
        shown = ", ".join(f"{path}:{n}" for n in bad[:3]) + (" ..." if len(bad) > 3 else "")
        problems.append(f"{len(bad)} line(s) of {path.name} are not valid JSON objects (left out): {shown}")
    return rows


def _json_object(path: Path, problems: list[str]) -> dict:
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        problems.append(f"{path} is not valid JSON ({e.__class__.__name__}: {e}); the report is drawn without it")
        return {}
    if not isinstance(value, dict):
        problems.append(f"{path} holds a {type(value).__name__}, not an object; the report is drawn without it")
        return {}
    return value


def read_run(path: str | Path) -> RunData:
    path = Path(path)
    if not path.is_dir():
        raise MMTuneError(f"{path} is not a run folder", where=str(path),
                          fix="give the output_dir of a run (it holds metrics.jsonl and summary.json)")
    if not (path / "metrics.jsonl").exists() and not (path / "summary.json").exists():
        raise MMTuneError(f"{path} holds no metrics.jsonl or summary.json: not a run folder, or the run "
                          "never reached its first step", where=str(path),
                          fix="give the output_dir a `mmtune train` wrote")
    data = RunData(path=path, name=path.resolve().name)
    for row in _jsonl(path / "metrics.jsonl", data.problems):
        target = data.eval if row.get("kind") == "eval" else data.train
        for k, v in row.items():
            x = _number(v)
            if k in ("step", "kind") or x is None or (target is data.train and k not in TRAIN_SERIES
                                                           and not k.startswith(TRAIN_PREFIXES)):
                continue
            target.setdefault(k, []).append((int(row.get("step", 0)), x))
    if (path / "summary.json").exists():
        data.summary = _json_object(path / "summary.json", data.problems)
    preds = _jsonl(path / "predictions.jsonl", data.problems)
    last = max((r.get("step", 0) for r in preds), default=0)
    data.predictions = [r for r in preds if r.get("step", 0) == last]
    if (path / "config.resolved.yaml").exists():
        data.config_text = (path / "config.resolved.yaml").read_text(encoding="utf-8", errors="replace")
    return data


def eval_records_by_id(run: RunData) -> dict:
    """The eval records (with their media) the predictions name, read again from the run's resolved
    config. Best effort: data moved since the run only costs the thumbnails, not the report."""
    if not run.config_text or not run.predictions:
        return {}
    from ..config import load_config
    from ..data.sources import load_records

    try:
        cfg = load_config(run.path / "config.resolved.yaml")
        if not cfg.data.eval:
            return {}
        rs = load_records(cfg.data.eval, cfg.data, "eval")
    except MMTuneError as e:
        run.problems.append(f"eval records not shown with their media: {e.what}")
        return {}
    return {r.id: r for r in rs.records}
