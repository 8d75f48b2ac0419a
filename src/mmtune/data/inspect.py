"""`mmtune data inspect`: encode every record the way training will and report what came out.

Counts ok/bad by reason, the token length distribution split by text/image/video/audio tokens
(failure modes 2 and 17: the worst case the planner must fit), and a few rendered examples with the
label mask shown, so a wrong mask is seen before a GPU is rented. Only the processor is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .formats import BadRecord
from .records import MEDIA_TYPES, RecordSet

KINDS = ("text",) + MEDIA_TYPES


@dataclass
class Scan:
    """What encoding every record produced: kept records, counts by reason, token counts per record."""

    records: RecordSet
    lengths: list[dict] = field(default_factory=list)  # token_counts of each kept record
    too_long: int = 0

    def distribution(self) -> dict:
        out = {}
        for k in KINDS + ("total",):
            vals = sorted(x[k] for x in self.lengths)
            if not vals:
                out[k] = {"max": 0, "p95": 0, "mean": 0.0}
                continue
            p95 = vals[min(len(vals) - 1, math.ceil(0.95 * len(vals)) - 1)]
            out[k] = {"max": vals[-1], "p95": p95, "mean": round(sum(vals) / len(vals), 1)}
        return out


def scan_records(rs: RecordSet, encoder, on_bad: str = "error", cache=None, progress: str | None = None,
                 encode: bool = True, processes: int = 1) -> Scan:
    """Check each record once: placeholders counted, length checked against data.max_length. Under
    "error" the first bad record raises; under "skip" it is counted and left out of the returned
    RecordSet (which keeps the loading-time skips too).

    Without a cache every record is encoded (media decoded). With one (`data.encode_cache.EncodeCache`,
    the training run's), records are encoded and kept while the cache has room, so the loop never
    encodes them again; once it is full the rest are measured (`Encoder.measure`: the same lengths and
    checks from media headers, no pixels) and the loop encodes them when it draws them.
    `progress`: a label to show the scan's progress under (console.TaskBar).
    `encode=False`: every record is measured, none encoded (training's start-up scan: the loop encodes
    each record when it first draws it and keeps it in the run's cache, so start-up decodes no pixels);
    with `processes` > 1 the measuring is split over spawned processes (data/parallel_measure.py), with
    the same result in the same order."""
    from ..console import TaskBar

    with TaskBar(progress or "", len(rs.records), enabled=None if progress else False) as bar:
        measured = None
        if not encode and processes > 1:  # measured up front, in parallel; read back in order below
            from .parallel_measure import measure_distinct

            measured = measure_distinct(encoder, rs.records, processes, bar.advance)
        # (the progress shown was the measuring's, when it ran up front)
        return _scan(rs, encoder, on_bad, cache, bar.advance if measured is None else _nothing, encode, measured)


def _nothing() -> None:
    pass


def _scan(rs: RecordSet, encoder, on_bad: str, cache, advance, encode: bool = True, measured=None) -> Scan:
    from .encode_cache import key

    kept = RecordSet(skipped=dict(rs.skipped), problems=list(rs.problems), notes=list(rs.notes))
    scan = Scan(kept)
    seen: dict[str, dict] = {}  # a mixture repeats records (the same objects): check each once
    for r in rs.records:
        advance()
        k, out = key(r), None
        try:
            if k in seen:
                counts = seen[k]
            elif measured is not None:
                got = measured[k]
                if got[0] != "ok":
                    from .parallel_measure import as_exception

                    raise as_exception(got)
                counts = got[1]
            elif not encode or (cache is not None and cache.full):
                counts = encoder.measure(r)
            else:
                out = encoder.encode(r)  # "too long" as _check_length below says it, before tokenizing where it can
                ids = out["input_ids"]
                counts = {m: int((ids == encoder.media_token_id[m]).sum()) if m in encoder.media_token_id else 0
                          for m in MEDIA_TYPES}
                counts["total"] = int(ids.numel())
                counts["text"] = counts["total"] - sum(counts[m] for m in MEDIA_TYPES)
            encoder._check_length(counts["total"], r)
        except BadRecord as e:
            kept.bad(e, r.source, on_bad)
            continue
        if cache is not None and out is not None:
            cache.put(k, out)
        seen[k] = counts
        kept.records.append(r)
        scan.lengths.append(counts)
    return scan


def show_mask(encoded: dict, tokenizer, media_ids: set[int]) -> str:
    """The encoded text with answer tokens (the ones trained on) in [[...]], media runs collapsed."""
    ids, labels = encoded["input_ids"].tolist(), encoded["labels"].tolist()
    out, i = [], 0
    while i < len(ids):
        if ids[i] in media_ids:
            j = i
            while j < len(ids) and ids[j] == ids[i]:
                j += 1
            out.append(f"{tokenizer.convert_ids_to_tokens(ids[i])}x{j - i}")
            i = j
            continue
        trained = labels[i] != -100
        j = i
        while j < len(ids) and ids[j] not in media_ids and (labels[j] != -100) == trained:
            j += 1
        text = tokenizer.decode(ids[i:j])
        out.append(f"[[{text}]]" if trained else text)
        i = j
    return "".join(out)


def inspect_data(resolved, split: str = "train", n_examples: int = 3) -> dict:
    """Encode every record of a split of the resolved run, as training will (the run's processor and caps)."""
    from .encode import Encoder
    from .sources import load_records
    from .text_windows import windowed

    cfg = resolved.cfg
    spec = cfg.data.train if split == "train" else cfg.data.eval
    if not spec:
        from ..errors import ConfigError

        key = "data.train" if split == "train" else "data.eval"
        raise ConfigError(f"no data for split {split!r}", where=key, fix=f"set {key}=path/to/file.jsonl")
    encoder = Encoder.for_run(resolved)
    # Inspection counts every bad record by reason, whatever data.on_bad_record says: under "error" the
    # note below names the record training would stop at, instead of inspect stopping there itself.
    rs = load_records(spec, cfg.data.model_copy(update={"on_bad_record": "skip"}), split)
    rs = windowed(rs, encoder, "skip")  # raw text cut to data.max_length, counted in the notes
    scan = scan_records(rs, encoder, "skip")
    stops = []
    if cfg.data.on_bad_record == "error" and scan.records.problems:
        where, what = scan.records.problems[0]
        stops.append(f"data.on_bad_record=error: training would stop at the first bad record found ({where}: "
                     f"{what}); data.on_bad_record=skip leaves the {scan.records.n_skipped} out, counted")
    media_ids = set(encoder.media_token_id.values())
    examples = []
    for r in scan.records.records[:n_examples]:
        enc = encoder.encode(r)
        examples.append({"id": r.id, "source": r.source, "tokens": int(enc["input_ids"].numel()),
                         "rendered": show_mask(enc, encoder.tokenizer, media_ids)})
    return {
        "spec": spec, "split": split, "model": cfg.model.name,
        "ok": len(scan.records.records), "bad": dict(scan.records.skipped), "on_bad_record": cfg.data.on_bad_record,
        "problems": [{"where": w, "what": what} for w, what in scan.records.problems[:20]],
        "notes": stops + scan.records.notes + [d.line() for d in resolved.decisions if d.key.startswith(("model.", "data.",
                                                                                                     "processor"))],
        "max_length": cfg.data.max_length,
        "tokens": scan.distribution(),
        "examples": examples,
    }
