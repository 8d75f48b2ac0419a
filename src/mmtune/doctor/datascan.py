"""One streaming pass over the dataset: every record checked, nothing held but counters.

Rows come from the data package's own readers (`iter_rows`, `row_to_records`, the same code
training uses), so a record the scan passes is a record training accepts. Per record: its format
fields (failure mode 14), placeholders vs media (16), media present and readable by header (18),
modalities the model has, and its token length with media tokens against `data.max_length` (17).
Memory stays bounded: counters, a few examples per reason, one int per record for the length
distribution, and a batch of 256 records waiting for one tokenizer call.
"""

from __future__ import annotations

import json
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DataError
from .context import NotAvailable

BATCH = 256
EXAMPLES_PER_REASON = 5

# Reason keys (as counted in the table) -> the check that reports them.
REASON_CODES = {
    "bad json": "MM014", "missing field": "MM014", "no answer": "MM014", "bad media": "MM014",
    "placeholder mismatch": "MM016",
    "media cut by truncation": "MM017", "answer cut by truncation": "MM017",
    "missing media": "MM018", "corrupt media": "MM018",
    "unsupported modality": "MM033",
}


@dataclass
class SplitScan:
    split: str
    spec: str
    rows: int = 0
    ok: int = 0
    bad: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)  # reason -> [(where, what, fix)]
    lengths: array = field(default_factory=lambda: array("I"))
    media_tokens_max: int = 0
    longest: tuple[int, str] = (0, "")
    modalities: Counter = field(default_factory=Counter)  # media items by type
    signatures: Counter = field(default_factory=Counter)  # records by media kinds: text, image, image+video
    clean_path: str | None = None
    clean_written: int = 0
    clean_unwritable: int = 0

    def add_bad(self, reason: str, where: str, what: str, fix: str | None) -> None:
        self.bad[reason] += 1
        ex = self.examples.setdefault(reason, [])
        if len(ex) < EXAMPLES_PER_REASON:
            ex.append((where, what, fix))

    @property
    def n_bad(self) -> int:
        return sum(self.bad.values())

    def percentile(self, q: float) -> int:
        if not self.lengths:
            return 0
        s = sorted(self.lengths)
        return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


@dataclass
class DataScan:
    splits: list[SplitScan] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def table_rows(self) -> list[tuple]:
        rows = []
        for s in self.splits:
            total = s.ok + s.n_bad
            rows.append((s.split, total, s.ok, s.n_bad, ""))
            for reason, n in s.bad.most_common():
                rows.append(("", "", "", n, reason))
        return rows

    def bad_by_code(self, code: str):
        for s in self.splits:
            for reason, n in s.bad.items():
                if REASON_CODES.get(reason) == code:
                    yield s, reason, n


def _reason_of(err: DataError) -> str:
    what = err.what
    for r in ("missing media", "corrupt media"):
        if what.startswith(r):
            return r
    if "not found" in what:
        return "missing media"
    return "corrupt media"


class _Pending:
    """Records waiting for one batched tokenizer call, grouped by source row (for --write-clean)."""

    def __init__(self):
        self.rows: list[tuple[object, list]] = []  # (raw row, [(record, media counts, bad reason or None)])
        self.n = 0


def scan_split(split: str, spec: str, cfg, pinfo, *, limit=None, write_clean: Path | None = None) -> SplitScan:
    from ..data.formats import BadRecord, check_format, row_to_records
    from ..data.sources import iter_rows, make_resolver
    from .tokens import TokenCounter

    scan = SplitScan(split, spec)
    counter = TokenCounter(pinfo.processor, pinfo.family, cfg) if pinfo.processor is not None else None
    modalities = set(pinfo.family.modalities)
    max_len = cfg.data.max_length
    out = None
    if write_clean is not None:
        write_clean.parent.mkdir(parents=True, exist_ok=True)
        out = open(write_clean, "w", encoding="utf-8")
        scan.clean_path = str(write_clean)

    if spec.startswith("synthetic:"):
        from ..data.synthetic import load_synthetic

        rs = load_synthetic(spec.split(":", 1)[1], cfg.data, split)
        rows = ((r.source, r) for r in rs.records)
        resolve = None
    else:
        check_format(cfg.data.format, dict(cfg.data.columns))
        path = Path(spec.partition("::")[0]).expanduser()
        if not path.exists():
            raise NotAvailable(f"data.{'train' if split == 'train' else 'eval'} does not exist (see MM026)")
        base, rows = iter_rows(spec, split)
        resolve = make_resolver(base, cfg.data.media_root)

    pending = _Pending()

    def flush():
        texts, counts, refs = [], [], []
        for _, recs in pending.rows:
            for i, (rec, cnt, bad) in enumerate(recs):
                if bad is None and counter is not None:
                    texts.append(counter.render(rec))
                    counts.append(cnt)
                    refs.append((recs, i))
        lengths = counter.lengths(texts, counts) if texts else []
        for (recs, i), ln, cnt in zip(refs, lengths, counts):
            rec = recs[i][0]
            where = rec.where()
            if ln.n_placeholders != len(cnt):
                recs[i] = (rec, cnt, ("placeholder mismatch",
                                      f"{len(cnt)} media item(s) but {ln.n_placeholders} media placeholder token(s) "
                                      "after the chat template (a literal placeholder in the text?)",
                                      "remove media placeholder tokens typed into the text; give media as parts"))
                continue
            scan.lengths.append(ln.total)
            scan.media_tokens_max = max(scan.media_tokens_max, ln.media_tokens)
            if ln.total > scan.longest[0]:
                scan.longest = (ln.total, where)
            if ln.through_last_media > max_len:
                recs[i] = (rec, cnt, ("media cut by truncation",
                                      f"{ln.total} tokens ({ln.media_tokens} of them media) > data.max_length={max_len}: "
                                      "truncation would cut media tokens and the model would fail on the mismatch",
                                      f"data.max_length={_round_up(ln.total)} or model.max_pixels=<smaller>"))
            elif ln.total > max_len:
                recs[i] = (rec, cnt, ("answer cut by truncation",
                                      f"{ln.total} tokens > data.max_length={max_len}: the answer would be cut",
                                      f"data.max_length={_round_up(ln.total)}"))
        for raw, recs in pending.rows:
            row_ok = True
            for rec, _, bad in recs:
                if bad is None:
                    scan.ok += 1
                else:
                    row_ok = False
                    scan.add_bad(bad[0], rec.where(), bad[1], bad[2])
            if row_ok and out is not None and isinstance(raw, dict):
                try:
                    out.write(json.dumps(raw, ensure_ascii=False) + "\n")
                    scan.clean_written += 1
                except (TypeError, ValueError):  # bytes or objects from parquet / datasets rows
                    scan.clean_unwritable += 1
        pending.rows.clear()
        pending.n = 0

    try:
        for index, (where, row) in enumerate(rows):
            if limit is not None and index >= limit:
                break
            scan.rows += 1
            if resolve is None:  # synthetic: already a Record
                recs_in, raw = [row], None
            else:
                raw = row
                try:
                    if isinstance(row, BadRecord):
                        raise row
                    recs_in = row_to_records(row, cfg.data.format, dict(cfg.data.columns), where, index, resolve)
                except BadRecord as e:
                    scan.add_bad(e.reason, e.where or where, e.what, e.fix)
                    continue
            recs = []
            for rec in recs_in:
                recs.append(_check_record(rec, counter, modalities, scan))
            pending.rows.append((raw, recs))
            pending.n += len(recs)
            if pending.n >= BATCH:
                flush()
        flush()
    finally:
        if out is not None:
            out.close()
    return scan


def _round_up(n: int) -> int:
    return ((n + 255) // 256) * 256


def _check_record(rec, counter, modalities, scan):
    """(record, media token counts, None or (reason, what, fix)) before the tokenizer pass."""
    counts = []
    kinds = sorted({p["type"] for p in rec.media_parts()})
    scan.signatures["+".join(kinds) or "text"] += 1
    for part in rec.media_parts():
        kind = part["type"]
        scan.modalities[kind] += 1
        if kind not in modalities or (counter is not None and not counter.supports(kind)):
            return rec, counts, ("unsupported modality", f"record has {kind} but the model takes "
                                 f"{'/'.join(sorted(modalities))}", "drop such records or pick a model family with "
                                 f"{kind} input")
        if counter is None:
            continue
        try:
            counts.append(counter.media_tokens(part))
        except DataError as e:
            from ..data.records import media_label

            reason = _reason_of(e)
            return rec, counts, (reason, f"{reason}: {media_label(part)}{e.what[len(reason):]}", e.fix)
    return rec, counts, None


def _sources(spec, cfg):
    """(spec, cfg, file tag) per source: a mixture (data.train as a list) is scanned source by source,
    each with its own format, columns and media root."""
    if not isinstance(spec, list):
        return [(spec, cfg, "")]
    from ..data.mixture import source_data_cfg

    return [(s.path, cfg.model_copy(update={"data": source_data_cfg(s, cfg.data)}), f".{s.name}") for s in spec]


def scan_dataset(cfg, pinfo, *, limit=None, write_clean: Path | None = None) -> DataScan:
    t0 = time.perf_counter()
    result = DataScan()
    if cfg.data.train:
        for spec, c, tag in _sources(cfg.data.train, cfg):
            clean = write_clean.with_name(write_clean.stem + tag + write_clean.suffix) if write_clean else None
            result.splits.append(scan_split("train", spec, c, pinfo, limit=limit, write_clean=clean))
    if cfg.data.eval:
        for spec, c, tag in _sources(cfg.data.eval, cfg):
            clean = write_clean.with_name(write_clean.stem + tag + ".eval" + write_clean.suffix) if write_clean else None
            result.splits.append(scan_split("eval", spec, c, pinfo, limit=limit, write_clean=clean))
    if not result.splits:
        raise NotAvailable("no data.train or data.eval to scan")
    result.seconds = time.perf_counter() - t0
    return result
