"""Task metrics on generated answers. Each takes predictions and references (a list of accepted
answers per item) and returns one number; higher is better except where LOWER_IS_BETTER says.

- exact_match: normalised string equality with any reference.
- mae: mean absolute error of the first number in the prediction vs the reference (counting tasks);
  a prediction with no number counts as the largest error seen among parsed ones, never skipped.
- vqa_accuracy: min(1, #matching references / 3), the VQAv2 rule.
- anls: average normalised Levenshtein similarity with threshold 0.5 (InfoVQA / DocVQA).
- relaxed_accuracy: numbers within 5 % count as correct, else exact match (ChartQA).
- f1: token-level F1 against the best reference (SQuAD style).
"""

from __future__ import annotations

import re
import string

LOWER_IS_BETTER = {"mae", "eval_loss", "loss"}
_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def normalize(text: str) -> str:
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation) - {"."}).rstrip(".")
    return " ".join(text.split())


def first_number(text: str) -> float | None:
    m = _NUM.search(text.replace(",", ""))
    return float(m.group()) if m else None


def exact_match(preds, refs) -> float:
    return _mean([float(any(normalize(p) == normalize(r) for r in rs)) for p, rs in zip(preds, refs)])


def mae(preds, refs) -> float:
    errors: list[float | None] = []
    for p, rs in zip(preds, refs):
        pv, rv = first_number(p), first_number(rs[0])
        if rv is None:
            raise ValueError(f"mae needs numeric references; got {rs[0]!r}")
        errors.append(None if pv is None else abs(pv - rv))
    parsed = [e for e in errors if e is not None]
    worst = max(parsed) if parsed else max(abs(first_number(rs[0])) for rs in refs) + 1.0
    return _mean([worst if e is None else e for e in errors])


def vqa_accuracy(preds, refs) -> float:
    return _mean([min(1.0, sum(normalize(p) == normalize(r) for r in rs) / 3.0) for p, rs in zip(preds, refs)])


def _levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def anls(preds, refs, threshold: float = 0.5) -> float:
    scores = []
    for p, rs in zip(preds, refs):
        best = 0.0
        for r in rs:
            a, b = normalize(p), normalize(r)
            sim = 1.0 - _levenshtein(a, b) / max(len(a), len(b), 1)
            best = max(best, sim if sim >= threshold else 0.0)
        scores.append(best)
    return _mean(scores)


def relaxed_accuracy(preds, refs, tolerance: float = 0.05) -> float:
    def ok(p: str, r: str) -> bool:
        pv, rv = first_number(p), first_number(r)
        if pv is not None and rv is not None and _NUM.fullmatch(r.strip().replace(",", "")):
            return abs(pv - rv) <= tolerance * abs(rv) if rv != 0 else pv == 0
        return normalize(p) == normalize(r)

    return _mean([float(any(ok(p, r) for r in rs)) for p, rs in zip(preds, refs)])


def f1(preds, refs) -> float:
    def one(p: str, r: str) -> float:
        pt, rt = normalize(p).split(), normalize(r).split()
        common = sum(min(pt.count(w), rt.count(w)) for w in set(pt))
        if not pt or not rt or common == 0:
            return float(pt == rt)
        prec, rec = common / len(pt), common / len(rt)
        return 2 * prec * rec / (prec + rec)

    return _mean([max(one(p, r) for r in rs) for p, rs in zip(preds, refs)])


METRICS = {"exact_match": exact_match, "mae": mae, "vqa_accuracy": vqa_accuracy, "anls": anls,
           "relaxed_accuracy": relaxed_accuracy, "f1": f1}


def compute(names, preds, refs) -> dict[str, float]:
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        from ..errors import ConfigError

        raise ConfigError(f"unknown metric(s) {unknown}", where="eval.metrics", fix=f"choose from {sorted(METRICS)}")
    return {n: METRICS[n](preds, refs) for n in names}


def greater_is_better(name: str) -> bool:
    return name.split("/")[-1] not in LOWER_IS_BETTER


def best_constant_baseline(names, train_answers: list[str], refs) -> dict[str, float]:
    """Metrics of the best constant answer learnable without looking at the input: the most frequent
    training answer (for matching metrics) and the median numeric training answer (for mae)."""
    from collections import Counter
    from statistics import median

    mode = Counter(normalize(a) for a in train_answers).most_common(1)[0][0] if train_answers else ""
    out = {}
    for n in names:
        if n == "mae":
            nums = [v for a in train_answers if (v := first_number(a)) is not None]
            const = str(median(nums)) if nums else mode
            out[n] = mae([const] * len(refs), refs)
        else:
            out[n] = METRICS[n]([mode] * len(refs), refs)
    return out


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")
