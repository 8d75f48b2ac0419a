"""Task metrics on generated answers, computed as the benchmarks' own scorers compute them, so that
numbers are comparable with papers and leaderboards. Each takes predictions and references (a list of
accepted answers per item) and returns one number; higher is better except where LOWER_IS_BETTER says.

- exact_match: equality after the VQA answer normalisation below, with any reference.
- vqa_accuracy: the VQAv2 scorer (github.com/GT-Vision-Lab/VQA, vqaEval.py): answers normalised by
  its processPunctuation + processDigitArticle; acc = min(1, #matching other annotators / 3) averaged
  over the leave-one-out subsets of the references (10 in VQAv2). With a single reference (OCR-VQA)
  that average is undefined; it is then exact match after the same normalisation.
- anls: the DocVQA / InfoVQA scorer (rrc.cvc.uab.es): lower-case, strip and collapse whitespace (no
  punctuation removed), normalised Levenshtein distance over the longer of the raw strings, best
  reference, score 1 - NL, set to 0 when below 0.5.
- relaxed_accuracy: ChartQA's relaxed correctness (Masry et al. 2022, as in pix2struct): when the whole
  prediction and the whole reference parse as numbers (a trailing % divides by 100) and the reference is
  non-zero, correct within 5 % relative error; otherwise case-insensitive string equality. A number
  inside a sentence ("45 million") is not a number.
- mae / rmse: counting errors of the number parsed from each answer (parse_number: digits with
  thousands separators, number words, "about 12", "COUNT: 17"). An answer with no number scores as an
  answer of 0 (its error is the reference count) and is counted: compute() adds `unparsable`.
- f1: token-level F1 against the best reference, SQuAD's normalisation (articles and punctuation dropped).
- wer / cer: speech recognition's word and character error rates (jiwer's corpus-level definition: edits over
  all items divided by the references' total words / characters, spaces counted as characters), after
  lower-casing, dropping punctuation and collapsing whitespace; lower is better.

compute() scores the final answer: a reasoning block (`<think>...</think>`, Qwen3 / Qwen3-VL / DeepSeek-R1;
R1's generation prompt opens `<think>` itself, so only the closing tag may be generated) is dropped from
predictions and references alike, since the benchmarks' scorers compare answers, not reasoning. A thinking
model writes "<think>\n\n</think>\n\n7" for "7" even when its data has no reasoning
(https://github.com/hiyouga/LlamaFactory/issues/9392), which every metric above scored wrong
(https://github.com/EleutherAI/lm-evaluation-harness/pull/3240). A block opened and not closed (generation cut
mid-thought) scores as no answer. predictions.jsonl keeps the raw text.
"""

from __future__ import annotations

import math
import re

LOWER_IS_BETTER = {"mae", "rmse", "eval_loss", "loss", "unparsable", "wer", "cer"}

# ---- VQAv2 answer normalisation (vqaEval.py) ------------------------------------------------------
_CONTRACTIONS = {
    "aint": "ain't", "arent": "aren't", "cant": "can't", "couldve": "could've", "couldnt": "couldn't",
    "couldn'tve": "couldn't've", "couldnt've": "couldn't've", "didnt": "didn't", "doesnt": "doesn't",
    "dont": "don't", "hadnt": "hadn't", "hadnt've": "hadn't've", "hadn'tve": "hadn't've", "hasnt": "hasn't",
    "havent": "haven't", "hed": "he'd", "hed've": "he'd've", "he'dve": "he'd've", "hes": "he's", "howd": "how'd",
    "howll": "how'll", "hows": "how's", "Id've": "I'd've", "I'dve": "I'd've", "Im": "I'm", "Ive": "I've",
    "isnt": "isn't", "itd": "it'd", "itd've": "it'd've", "it'dve": "it'd've", "itll": "it'll", "let's": "let's",
    "maam": "ma'am", "mightnt": "mightn't", "mightnt've": "mightn't've", "mightn'tve": "mightn't've",
    "mightve": "might've", "mustnt": "mustn't", "mustve": "must've", "neednt": "needn't", "notve": "not've",
    "oclock": "o'clock", "oughtnt": "oughtn't", "ow's'at": "'ow's'at", "'ows'at": "'ow's'at", "'ow'sat": "'ow's'at",
    "shant": "shan't", "shed've": "she'd've", "she'dve": "she'd've", "she's": "she's", "shouldve": "should've",
    "shouldnt": "shouldn't", "shouldnt've": "shouldn't've", "shouldn'tve": "shouldn't've", "somebody'd": "somebodyd",
    "somebodyd've": "somebody'd've", "somebody'dve": "somebody'd've", "somebodyll": "somebody'll",
    "somebodys": "somebody's", "someoned": "someone'd", "someoned've": "someone'd've", "someone'dve": "someone'd've",
    "someonell": "someone'll", "someones": "someone's", "somethingd": "something'd", "somethingd've": "something'd've",
    "something'dve": "something'd've", "somethingll": "something'll", "thats": "that's", "thered": "there'd",
    "thered've": "there'd've", "there'dve": "there'd've", "therere": "there're", "theres": "there's",
    "theyd": "they'd", "theyd've": "they'd've", "they'dve": "they'd've", "theyll": "they'll", "theyre": "they're",
    "theyve": "they've", "twas": "'twas", "wasnt": "wasn't", "wed've": "we'd've", "we'dve": "we'd've",
    "weve": "we've", "werent": "weren't", "whatll": "what'll", "whatre": "what're", "whats": "what's",
    "whatve": "what've", "whens": "when's", "whered": "where'd", "wheres": "where's", "whereve": "where've",
    "whod": "who'd", "whod've": "who'd've", "who'dve": "who'd've", "wholl": "who'll", "whos": "who's",
    "whove": "who've", "whyll": "why'll", "whyre": "why're", "whys": "why's", "wont": "won't", "wouldve": "would've",
    "wouldnt": "wouldn't", "wouldnt've": "wouldn't've", "wouldn'tve": "wouldn't've", "yall": "y'all",
    "yall'll": "y'all'll", "y'allll": "y'all'll", "yall'd've": "y'all'd've", "y'alld've": "y'all'd've",
    "y'all'dve": "y'all'd've", "youd": "you'd", "youd've": "you'd've", "you'dve": "you'd've", "youll": "you'll",
    "youre": "you're", "youve": "you've",
}
_MANUAL_MAP = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
               "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10"}
_ARTICLES = {"a", "an", "the"}
_PERIOD_STRIP = re.compile(r"(?!<=\d)(\.)(?!\d)")  # sic: the scorer's pattern, kept for identical results
_COMMA_STRIP = re.compile(r"(\d)(,)(\d)")
_PUNCT = [";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!"]


def _process_punctuation(text: str) -> str:
    out = text
    for p in _PUNCT:
        if (p + " " in text or " " + p in text) or _COMMA_STRIP.search(text) is not None:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    # The scorer passes re.UNICODE (32) as sub()'s count argument: at most 32 periods are stripped.
    return _PERIOD_STRIP.sub("", out, count=32)


def _process_digit_article(text: str) -> str:
    words = [_MANUAL_MAP.get(w, w) for w in text.lower().split()]
    words = _drop_articles(words)
    return " ".join(_CONTRACTIONS.get(w, w) for w in words)


def _drop_articles(words: list[str]) -> list[str]:
    """The words without articles, unless the answer is nothing but articles: a multiple-choice "A" would
    normalise to "", which an empty generation equals, so every empty answer scored right against it
    (https://github.com/OpenBMB/UltraRAG/pull/510). Such an answer keeps its words: "A" matches "a" only."""
    kept = [w for w in words if w not in _ARTICLES]
    return kept if kept else words


def vqa_normalize(text: str) -> str:
    """An answer as the VQAv2 scorer compares it."""
    text = text.replace("\n", " ").replace("\t", " ").strip()
    return _process_digit_article(_process_punctuation(text))


normalize = vqa_normalize


# ---- numbers -------------------------------------------------------------------------------------
_UNITS = {w: i for i, w in enumerate(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                                      "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
                                      "seventeen", "eighteen", "nineteen"])}
_TENS = {w: 10 * i for i, w in enumerate(["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty",
                                          "ninety"], start=2)}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_NUM = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?|-?\.\d+")
_WORD = re.compile(r"[a-z]+")


def _words_number(tokens: list[str]) -> float | None:
    """'one hundred and five' -> 105, 'twenty-one' -> 21 (tokens already split on spaces and hyphens)."""
    total, current, seen = 0, 0, False
    for t in tokens:
        if t in _UNITS:
            current += _UNITS[t]
        elif t in _TENS:
            current += _TENS[t]
        elif t == "hundred":
            current = max(current, 1) * 100
        elif t in _SCALES:
            total += max(current, 1) * _SCALES[t]
            current = 0
        elif t == "and" and seen:
            continue
        else:
            break
        seen = True
    return float(total + current) if seen else None


def parse_number(text: str) -> float | None:
    """The number an answer states: after a `COUNT:`-style label when there is one, else the first
    number written in digits ("1,234", "12.5", "about 12") or in words ("seventeen", "twenty-one"),
    whichever comes first. None when the answer holds no number."""
    s = str(text).strip().lower()
    label = re.search(r"\b(?:count|answer|total)\s*[:=]\s*", s)
    if label:
        s = s[label.end():]
    m = _NUM.search(s)
    words = [(w.start(), w.group()) for w in _WORD.finditer(s.replace("-", " "))]
    for k, (pos, w) in enumerate(words):
        if (w in _UNITS or w in _TENS) and (m is None or pos < m.start()):
            return _words_number([x for _, x in words[k:]])
    if m is None:
        return None
    return float(m.group().replace(",", ""))


def first_number(text: str) -> float | None:  # kept for callers of the old name
    return parse_number(text)


def _count_errors(preds, refs) -> tuple[list[float], int]:
    errors, unparsable = [], 0
    for p, rs in zip(preds, refs):
        rv = parse_number(rs[0])
        if rv is None:
            raise ValueError(f"mae/rmse need numeric references; got {rs[0]!r}")
        pv = parse_number(p)
        if pv is None:
            unparsable += 1
            pv = 0.0
        errors.append(abs(pv - rv))
    return errors, unparsable


def mae(preds, refs) -> float:
    return _mean(_count_errors(preds, refs)[0])


def rmse(preds, refs) -> float:
    errors = _count_errors(preds, refs)[0]
    return math.sqrt(_mean(e * e for e in errors)) if errors else float("nan")


def unparsable(preds, refs) -> float:
    """How many answers held no number (scored as answers of 0 by mae / rmse)."""
    return float(sum(parse_number(p) is None for p in preds))


# ---- matching metrics ----------------------------------------------------------------------------
def exact_match(preds, refs) -> float:
    return _mean([float(any(vqa_normalize(p) == vqa_normalize(r) for r in rs)) for p, rs in zip(preds, refs)])


def vqa_accuracy(preds, refs) -> float:
    scores = []
    for p, rs in zip(preds, refs):
        pred = vqa_normalize(p)
        gts = [vqa_normalize(r) for r in rs]
        if len(gts) == 1:
            scores.append(float(pred == gts[0]))
            continue
        accs = [min(1.0, sum(g == pred for j, g in enumerate(gts) if j != i) / 3.0) for i in range(len(gts))]
        scores.append(sum(accs) / len(accs))
    return _mean(scores)


def _levenshtein(a, b) -> int:  # strings (characters) or lists (words)
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
        det = " ".join(p.strip().lower().split())
        values = []
        for r in rs:
            gt = " ".join(r.strip().lower().split())
            length = max(len(r.upper()), len(p.upper()))  # the scorer measures the raw strings
            values.append(0.0 if length == 0 else _levenshtein(gt, det) / length)
        score = 1.0 - min(values) if values else 0.0
        scores.append(0.0 if score < threshold else score)
    return _mean(scores)


def _relaxed_float(text: str) -> float | None:
    try:
        return float(text.rstrip("%")) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        return None


def relaxed_correctness(prediction: str, target: str, max_relative_change: float = 0.05) -> bool:
    prediction, target = prediction.strip(), target.strip()
    pv, tv = _relaxed_float(prediction), _relaxed_float(target)
    if pv is not None and tv:
        return abs(pv - tv) / abs(tv) <= max_relative_change
    return prediction.lower() == target.lower()


def relaxed_accuracy(preds, refs, tolerance: float = 0.05) -> float:
    return _mean([float(any(relaxed_correctness(p, r, tolerance) for r in rs)) for p, rs in zip(preds, refs)])


def _squad_normalize(text: str) -> str:
    """SQuAD's normalize_answer: lower case, no punctuation, no articles, single spaces."""
    import string

    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(_drop_articles(text.split()))


def f1(preds, refs) -> float:
    def one(p: str, r: str) -> float:
        pt, rt = _squad_normalize(p).split(), _squad_normalize(r).split()
        common = sum(min(pt.count(w), rt.count(w)) for w in set(pt))
        if not pt or not rt or common == 0:
            return float(pt == rt)
        prec, rec = common / len(pt), common / len(rt)
        return 2 * prec * rec / (prec + rec)

    return _mean([max(one(p, r) for r in rs) for p, rs in zip(preds, refs)])


def _asr_normalize(text: str) -> str:
    """Lower case, punctuation (Unicode P*) dropped, whitespace collapsed: the basic normalisation transcripts are
    scored after (Whisper's BasicTextNormalizer without its bracket removal); no spelling or number rewrites."""
    import unicodedata

    text = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text.lower())
    return " ".join(text.split())


def _error_rate(preds, refs, unit) -> float:
    """Corpus error rate: edits (substitutions + deletions + insertions) over all items, divided by the references'
    length, in `unit`s (words or characters); against each item's closest reference. 0 is perfect; an output
    longer than its reference can exceed 1."""
    edits = length = 0
    for p, rs in zip(preds, refs):
        hyp = unit(_asr_normalize(p))
        best = min((unit(_asr_normalize(r)) for r in rs), key=lambda ref: _levenshtein(ref, hyp) / max(len(ref), 1),
                   default=[])
        edits += _levenshtein(best, hyp)
        length += len(best)
    return edits / length if length else float(edits > 0)


def wer(preds, refs) -> float:
    return _error_rate(preds, refs, str.split)


def cer(preds, refs) -> float:
    return _error_rate(preds, refs, list)


# Grounding boxes as Qwen-VL writes them: `<|box_start|>(x1,y1),(x2,y2)<|box_end|>` (Qwen2-VL) and
# `"bbox_2d": [x1, y1, x2, y2]` (Qwen2.5-VL, Qwen3-VL). data/boxes.py reads records' boxes with the same patterns.
_BOX_NUM = r"\s*(-?\d+(?:\.\d+)?)\s*"
BOX_PATTERNS = (
    re.compile(r"<\|box_start\|>\s*\(" + _BOX_NUM + "," + _BOX_NUM + r"\)\s*,\s*\(" + _BOX_NUM + "," + _BOX_NUM
               + r"\)\s*<\|box_end\|>"),
    re.compile(r"[\"']?bbox_2d[\"']?\s*:\s*\[" + _BOX_NUM + "," + _BOX_NUM + "," + _BOX_NUM + "," + _BOX_NUM + r"\]"),
)


def find_boxes(text: str) -> list[tuple[str, tuple[float, ...]]]:
    """(as written, (x1, y1, x2, y2)) for each box in `text`, in order of appearance."""
    found = [(m.start(), m.group(0), tuple(float(g) for g in m.groups())) for pat in BOX_PATTERNS for m in pat.finditer(text)]
    return [(raw, box) for _, raw, box in sorted(found)]


def _iou(a, b) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(0.0, w) * max(0.0, h)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _box_ious(preds, refs) -> list[float]:
    """Per item: the IoU of the prediction's first box with the closest reference's first box, in the space both
    are written in (IoU does not change when x and y are scaled, so a 0-1000 grid and pixels score alike; nothing
    is converted). No box in the prediction: 0."""
    out = []
    for p, rs in zip(preds, refs):
        pb = find_boxes(p)
        rbs = [b[0][1] for r in rs if (b := find_boxes(r))]
        out.append(max((_iou(pb[0][1], rb) for rb in rbs), default=0.0) if pb else 0.0)
    return out


def box_iou(preds, refs) -> float:
    return _mean(_box_ious(preds, refs))


def box_acc50(preds, refs) -> float:
    """Share of items whose first box overlaps the reference's at IoU >= 0.5 (RefCOCO's accuracy@0.5)."""
    return _mean(float(v >= 0.5) for v in _box_ious(preds, refs))


METRICS = {"exact_match": exact_match, "mae": mae, "rmse": rmse, "vqa_accuracy": vqa_accuracy, "anls": anls,
           "relaxed_accuracy": relaxed_accuracy, "f1": f1, "wer": wer, "cer": cer, "box_iou": box_iou,
           "box_acc50": box_acc50}


def compute(names, preds, refs) -> dict[str, float]:
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        from ..errors import ConfigError

        raise ConfigError(f"unknown metric(s) {unknown}", where="eval.metrics", fix=f"choose from {sorted(METRICS)}")
    preds = [final_answer(p) for p in preds]
    refs = [[final_answer(r) for r in rs] for rs in refs]
    out = {n: METRICS[n](preds, refs) for n in names}
    if {"mae", "rmse"} & set(names):
        out["unparsable"] = unparsable(preds, refs)
    return out


THINK_START, THINK_END = "<think>", "</think>"


def final_answer(text: str) -> str:
    """The text after the last closing reasoning tag, stripped; the text itself (stripped) without one.
    A reasoning block opened and never closed was cut by eval.max_new_tokens mid-thought: it has no final
    answer (""), not its half-written reasoning, whose first number mae / rmse would parse and whose words
    f1 / contains would match (https://github.com/EleutherAI/lm-evaluation-harness/issues/3382)."""
    text = str(text)
    if THINK_END in text:
        return text.rsplit(THINK_END, 1)[1].strip()
    return "" if THINK_START in text else text.strip()


def greater_is_better(name: str) -> bool:
    return name.split("/")[-1] not in LOWER_IS_BETTER


def best_constant_baseline(names, train_answers: list[str], refs) -> dict[str, float]:
    """Metrics of the best constant answer learnable without looking at the input: the most frequent
    training answer (for matching metrics) and the median numeric training answer (for mae / rmse)."""
    from collections import Counter
    from statistics import median

    mode = Counter(vqa_normalize(a) for a in train_answers).most_common(1)[0][0] if train_answers else ""
    out = {}
    for n in names:
        if n in ("mae", "rmse"):
            nums = [v for a in train_answers if (v := parse_number(a)) is not None]
            const = str(median(nums)) if nums else mode
            out[n] = METRICS[n]([const] * len(refs), refs)
        elif n in ("box_iou", "box_acc50"):  # the most frequent box as written (normalising would erase it)
            const = Counter(train_answers).most_common(1)[0][0] if train_answers else ""
            out[n] = METRICS[n]([const] * len(refs), refs)
        else:
            out[n] = METRICS[n]([mode] * len(refs), refs)
    return out


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")
