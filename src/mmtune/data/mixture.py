"""Mixtures: `data.train` as a list of sources, each with its own format, weight or sample count, and
eval split.

The training mixture is materialised once, as a fixed list of records drawn with a seeded generator
per source (`data.mixture_seed` + the source's name): every rank builds the identical list, and the
loop's BatchStream (shuffle by seed and epoch, resumable by position, every world_size-th record per
rank) then gives the mixture the same guarantees as a single file, mid-epoch resume included.

How many records a source contributes per epoch:
- `samples: N`: exactly N (drawn without replacement up to its size, whole copies beyond);
- `weight: w`: a share w / (sum of weights) of `data.mixture_size` (default: the weighted sources'
  records added up);
- neither: all its records, once.

Eval sets keep every record of each source's eval split (capped by `data.eval_max_samples` in total,
taken round-robin so that a cap keeps every source represented); each record carries its source's name
in `Record.origin`, which evaluation groups metrics by.
"""

from __future__ import annotations

import random

from .records import RecordSet

# The metrics each published format is scored with by its own benchmark.
FORMAT_METRICS = {"chartqa": ["relaxed_accuracy"], "infovqa": ["anls"], "ocrvqa": ["exact_match", "vqa_accuracy"],
                  "fsc147": ["mae", "rmse"], "asr": ["wer", "cer"]}


def source_data_cfg(src, data_cfg):
    """data_cfg as this source sees it: its own format, columns and media root where it sets them."""
    update = {"format": src.format or data_cfg.format,
              "columns": src.columns if src.columns is not None else data_cfg.columns,
              "media_root": src.media_root if src.media_root is not None else data_cfg.media_root}
    return data_cfg.model_copy(update=update)


def source_metrics(src, data_cfg, eval_metrics: list[str]) -> list[str]:
    if src.metrics:
        return list(src.metrics)
    return list(FORMAT_METRICS.get(src.format or data_cfg.format, eval_metrics))


def sample_counts(sizes: dict[str, int], sources, mixture_size: int | None) -> dict[str, int]:
    weighted = [s for s in sources if s.weight is not None]
    total = mixture_size or sum(sizes[s.name] for s in weighted)
    # weights scaled to at most 1 first: a weight of 1e308 times a count is inf, and round(inf) raises
    top = max((s.weight for s in weighted), default=1.0)
    wsum = sum(s.weight / top for s in weighted)
    counts = {}
    for s in sources:
        if s.samples is not None:
            counts[s.name] = s.samples
        elif s.weight is not None:
            counts[s.name] = max(1, round(total * (s.weight / top) / wsum))
        else:
            counts[s.name] = sizes[s.name]
    return counts


def held_out_sources(sources, data_cfg, out: RecordSet) -> list:
    """The eval sources that hold records of their own: a source that is one training file (or a glob pattern of
    them) has no eval split, so "its eval split" would be its training records and every metric would measure
    memorisation. Left out, with a note; a folder, a hub dataset, PATH::SPLIT and OCR-VQA's dataset.json (its rows
    carry their split) keep theirs, and so does an eval path the source names itself."""
    from pathlib import Path

    from .globs import is_pattern
    from .hub import is_hub_id

    if not isinstance(data_cfg.train, list):
        return list(sources)
    train = {s.name: s for s in data_cfg.train}
    kept = []
    for src in sources:
        path, own = src.path, train.get(src.name)
        one_file = ("::" not in path and not path.startswith("synthetic:") and not is_hub_id(path)
                    and (is_pattern(path) or Path(path).expanduser().is_file()))
        # the default (a source's `eval: true`) only: an eval path the config names is taken as given (MM061 warns)
        defaulted = own is not None and own.eval is True and own.path == path
        if defaulted and one_file and (src.format or data_cfg.format) != "ocrvqa":
            out.notes.append(f"{src.name}: not evaluated: {path} is one file with no eval split of its own, so its eval "
                             "records would be its training records (give the source `eval: PATH` of held-out records, "
                             "or data.eval)")
            continue
        kept.append(src)
    return kept


def draw(n: int, count: int, rng: random.Random) -> list[int]:
    """`count` indices into n records: whole copies of all of them, then a random subset, in order."""
    idx = list(range(n)) * (count // n)
    idx += sorted(rng.sample(range(n), count % n))
    return idx


def load_mixture(sources, data_cfg, split: str) -> RecordSet:
    from .one_source import load_source

    out = RecordSet()
    per_source: dict[str, list] = {}
    if split != "train":
        sources = held_out_sources(sources, data_cfg, out)
    for src in sources:
        rs = load_source(src.path, source_data_cfg(src, data_cfg), split, parts=src.parts)
        for r in rs.records:
            r.origin = src.name
        per_source[src.name] = rs.records
        for reason, n in rs.skipped.items():
            out.skipped[f"{src.name}: {reason}"] = out.skipped.get(f"{src.name}: {reason}", 0) + n
        out.problems.extend(rs.problems)
        out.notes.extend(f"{src.name}: {n}" for n in rs.notes)
    if split == "train":
        sizes = {k: len(v) for k, v in per_source.items()}
        counts = sample_counts(sizes, sources, data_cfg.mixture_size)
        for src in sources:
            recs = per_source[src.name]
            rng = random.Random(f"{data_cfg.mixture_seed}:{src.name}")
            out.records.extend(recs[i] for i in draw(len(recs), counts[src.name], rng))
        out.notes.append("mixture: " + ", ".join(f"{s.name} {counts[s.name]} of {sizes[s.name]}" for s in sources))
        return out
    # Eval: round-robin across sources so that any prefix (a cap) holds every source in turn.
    cap = data_cfg.eval_max_samples
    queues = [list(per_source[s.name]) for s in sources]
    while any(queues) and (cap is None or len(out.records) < cap):
        for q in queues:
            if q and (cap is None or len(out.records) < cap):
                out.records.append(q.pop(0))
    left = sum(len(q) for q in queues)
    if left:
        out.notes.append(f"kept {len(out.records)} eval records across {len(sources)} sources "
                         f"(data.eval_max_samples), {left} left out")
    return out
