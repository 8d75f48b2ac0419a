"""One streaming pass over the dataset: every record checked, nothing held but counters.

Rows come from the data package's own readers (`iter_rows`, `row_to_records`, the same code
training uses), and each record's length comes from the training encoder's length engine
(`Encoder.measure`: media sizes from headers, no pixels decoded), so a record the scan passes is a
record training accepts, and its length is the length training sees. Per record: its format fields
(failure mode 14), placeholders vs media (16), media present and readable by header (18), modalities
the model has, and its token length with media tokens against `data.max_length` (17). Memory stays
bounded: counters, a few examples per reason, one int per record for the length distribution.

Headers say a file opens, not that it decodes to the end (a truncated JPEG, a video cut short): the
media of each record are then decoded the way training decodes them (`Encoder._load_media`: PIL
`load()`, the sampled video frames, audio). Every record when the split has at most DECODE_SAMPLE
records with media (or with `--full` / `--write-clean`), else a uniform random sample of
DECODE_SAMPLE of them (reservoir sampling, fixed seed), whose result is stated with its confidence.
"""

from __future__ import annotations

import json
import random
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..data.boxes import BoxTally, observe
from ..errors import DataError
from .context import NotAvailable

EXAMPLES_PER_REASON = 5
# Records with media decoded in full per split without --full: none bad among n sampled bounds the bad
# fraction below 3/n with 95 % confidence (rule of three), 0.3 % for 1000.
DECODE_SAMPLE = 1000
SAMPLES_KEPT = 8  # first passing records per split kept for checks that encode a real record

# Reason keys (as counted in the table; the encoder's BadRecord reasons) -> the check that reports them.
# A reason not listed here (a new one in the data package) is reported under MM014 rather than counted
# in the table with no finding: a bad record is never silent.
REASON_CODES = {
    "bad json": "MM014", "missing field": "MM014", "no answer": "MM014", "bad media": "MM014",
    "bad conversation": "MM014", "bad csv": "MM014", "bad encoding": "MM014", "bad type": "MM014", "bad count": "MM014",
    "bad tool call": "MM014", "tools not rendered": "MM014",  # tool-calling records (data/tool_calls.py, tool_render.py)
    "reasoning dropped": "MM014",  # a template that drops the last answer's <think> reasoning (data/rendered_answer.py)
    "placeholder mismatch": "MM016",
    "too long": "MM017",
    "missing media": "MM018", "corrupt media": "MM018", "video too short": "MM018", "audio too short": "MM018",
    "processor error": "MM018",
    "image too large": "MM018", "not a regular file": "MM018", "bad sample rate": "MM018",
    "unsupported modality": "MM033",
    "special token in text": "MM060",
    "unreadable record": "MM014",
    # preference pairs (data/preference.py): checks/preference.py
    "pair media differ": "MM083", "no rejected answer": "MM083", "bad pair": "MM083",
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
    untimed_videos: int = 0  # video items with no frame rate (frames folders, in-memory frames): MM066
    untimed_first: str = ""  # where the first one is
    video_rate_max: tuple[float, str] = (0.0, "")  # the fastest rate a video file's frames are sampled at: MM066
    signatures: Counter = field(default_factory=Counter)  # records by media kinds: text, image, image+video
    video_audio: dict = field(default_factory=dict)  # "audio" / "plain" video records -> (count, first): MM033
    clean_path: str | None = None
    clean_written: int = 0
    clean_unwritable: int = 0
    media_records: int = 0  # records whose media were measured (candidates for the decode check)
    decoded: int = 0  # records whose media were decoded in full
    decode_bad: int = 0  # of those, how many failed to decode
    # Eval splits with generation: tokens of each evaluated record's shortest accepted answer.
    answers: int = 0  # records whose answers were counted
    answers_cut: int = 0  # of those, how many need more than eval.max_new_tokens
    answer_longest: tuple[int, str] = (0, "")
    answer_limit: int = 0  # the budget they were counted against (eval.max_new_tokens, or the one decided)
    # The first records that passed, for checks that encode a real record (collate, targets): no reload.
    samples: list = field(default_factory=list)
    # Eval records identical to a training record (MM061; conversation text and media files).
    leaked: int = 0
    leaked_first: str = ""
    system_records: int = 0  # records with a system message of their own (MM062)
    # Answers followed by a later user turn, and tool-call turns followed by their results (MM195: a template may
    # rewrite them in history: Qwen3's think block), their records, first
    earlier_answers: int = 0
    earlier_answer_records: int = 0
    earlier_answer_first: str = ""
    sampled: int | None = None  # only the first K rows were read: data.stream_sample, or --limit where the split is longer
    sampled_by: str = "data.streaming"
    # Training records that repeat an earlier training record exactly (MM068): count and first copy.
    repeated: int = 0
    repeated_first: str = ""
    # Audio clips longer than the audio encoder's window (MM082), counted only when model.audio_max_seconds
    # lets them through (else they are refused as "too long"): count, longest (seconds, where).
    audio_over_window: int = 0
    audio_longest: tuple[float, str] = (0.0, "")
    # Records whose id an earlier record of the split already had (noted by MM068: results are keyed by id).
    id_hashes: set = field(default_factory=set)
    repeated_ids: int = 0
    repeated_ids_first: str = ""
    # Preference pairs whose chosen and rejected answers are the same text (MM084): count and first.
    equal_pairs: int = 0
    equal_pairs_first: str = ""
    # Grounding boxes in the records' text against the family's coordinate space (MM273, data/boxes.py).
    boxes: BoxTally = field(default_factory=BoxTally)

    @property
    def decode_sampled(self) -> bool:
        return self.decoded < self.media_records

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
            label = s.split if s.sampled is None else f"{s.split} (first {s.sampled} rows: {s.sampled_by})"
            rows.append((label, total, s.ok, s.n_bad, ""))
            for reason, n in s.bad.most_common():
                rows.append(("", "", "", n, reason))
        return rows

    def bad_by_code(self, code: str):
        for s in self.splits:
            for reason, n in s.bad.items():
                if REASON_CODES.get(reason, "MM014") == code:
                    yield s, reason, n


def scan_split(split: str, spec: str, resolved, *, limit=None, write_clean: Path | None = None,
               full: bool = False, train_keys: set | None = None) -> SplitScan:
    """One split's pass. `train_keys`: the training records' keys, filled by the train split and read
    by the eval split (MM061: an eval record identical to a training record)."""
    from ..data.encode import Encoder
    from ..data.formats import BadRecord, isolated
    from ..data.one_source import open_source
    from ..data.row_records import row_to_records
    from ..data.text_windows import cut_documents

    cfg = resolved.cfg
    seen: set | None = set() if split == "train" else None  # training record keys (MM068 repeats)
    scan = SplitScan(split, spec)
    from ..data.preference import train_encoder

    # The training split through the objective's encoder (a dpo run measures both sides of each pair).
    encoder = train_encoder(resolved, Encoder.for_run(resolved)) if split == "train" else Encoder.for_run(resolved)
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
        try:  # the training loader's own opening: files, folders, Hub ids, data.dataset_info names
            src = open_source(spec, cfg.data, split)
        except DataError as e:
            if Path(spec.partition("::")[0]).expanduser().exists() or _matches(spec):
                raise  # a path that exists but cannot be read (a folder with no such split, a pipe): its own finding
            # MM026 reports what does not exist (a path, a registry name, a Hub id not cached).
            raise NotAvailable(f"data.{'train' if split == 'train' else 'eval'} cannot be read (see MM026): {e.what}") from None
        rows, resolve, fmt, columns, to_row = src.rows, src.resolve, src.fmt, src.columns, src.to_row
        # Entries a file marks for another split (OCR-VQA's dataset.json) are not this split's records:
        # the same filter `load_source` applies, so train and eval are scanned as training reads them.
        rows = _in_split(rows, fmt, src.wanted)
    # Decode inline when every record is decoded anyway (a written clean file must hold only rows that
    # decode); else keep a reservoir of records with media and decode it after the pass.
    decoder = _Decoder(encoder, scan, inline=full or out is not None)
    answers = _AnswerCounter(encoder, cfg, scan) if split == "eval" and cfg.eval.generate else None
    if split == "train" and cfg.train.objective == "grpo":  # MM122: the answers against the completion budget
        answers = _AnswerCounter(encoder, cfg, scan, limit=cfg.train.grpo.max_completion_length, cap=None)
    templates = {k: v for k, v in (("question", cfg.data.question_template), ("answer", cfg.data.answer_template)) if v}
    from ..resolve.processor import audio_window_seconds

    window = audio_window_seconds(encoder.processor)
    if window is not None and cfg.model.audio_max_seconds <= window:
        window = None  # longer clips are refused as "too long" by the encoder: nothing reaches the cut

    from ..console import TaskBar

    bar = TaskBar(f"doctor: {split} data", limit)  # rows are counted as read: the total is known only with --limit
    try:
        bar.__enter__()
        for index, (where, row) in enumerate(rows):
            if limit is not None and index >= limit:
                scan.sampled, scan.sampled_by = limit, "--limit"  # the split goes on: its totals are unknown
                break
            scan.rows += 1
            bar.advance()
            if resolve is None:  # synthetic: already a Record
                recs_in, raw = [row], None
            else:
                raw = row
                try:
                    if isinstance(row, BadRecord):
                        raise row
                    with isolated(where):  # the training loader's boundary (OpenSource.records)
                        row_fmt = src.format_of(row)  # a registry entry's raw-text rows: format text
                        if to_row is not None:
                            row = to_row(row, where)
                        recs_in = row_to_records(row, row_fmt, columns, where, index, resolve, templates=templates)
                        recs_in = cut_documents(recs_in, encoder)  # raw text: its windows, as training cuts it
                except BadRecord as e:
                    scan.add_bad(e.reason, e.where or where, e.what, e.fix)
                    continue
            row_ok = True
            for rec in recs_in:
                _look_at_text(rec, scan, train_keys, seen)
                if rec.rejected is not None and rec.answer_text().strip() == "".join(
                        p.get("text", "") for p in rec.rejected).strip():
                    scan.equal_pairs += 1
                    scan.equal_pairs_first = scan.equal_pairs_first or rec.where()
                ok = _check_record(rec, encoder, max_len, scan) and decoder.add(rec)
                if ok and window is not None:
                    _audio_past_window(rec, window, scan)
                if ok and len(scan.samples) < SAMPLES_KEPT:
                    scan.samples.append(rec)
                if ok and answers is not None:
                    answers.add(rec)
                row_ok = ok and row_ok
            if row_ok and out is not None and isinstance(raw, dict):
                try:
                    out.write(json.dumps(raw, ensure_ascii=False) + "\n")
                    scan.clean_written += 1
                except (TypeError, ValueError):  # bytes or objects from parquet / datasets rows
                    scan.clean_unwritable += 1
    finally:
        bar.__exit__(None, None, None)
        if out is not None:
            out.close()
    decoder.finish()
    if answers is not None:
        answers.finish()
    return scan


class _AnswerCounter:
    """How many tokens each evaluated record's answer needs, with the run's tokenizer: evaluation
    generates at most eval.max_new_tokens, so a longer answer is cut and scored wrong. A record with
    several accepted answers (`references`) needs only its shortest. Only the records evaluation
    reads: the first data.eval_max_samples. eval.max_new_tokens unset: the budget training will decide from
    these answers (resolve/generation_budget.py), known once every record is counted."""

    def __init__(self, encoder, cfg, scan: SplitScan, *, limit: int | None = None, cap: int | None = -1):
        """`limit` / `cap`: another budget and record cap (grpo's training split: max_completion_length, all)."""
        from ..resolve import generation_budget

        self.tok, self.encoder = encoder.tokenizer, encoder
        self.decided = limit is None and not generation_budget.is_set(cfg)
        self.limit = cfg.eval.max_new_tokens if limit is None else limit
        self.cap, self.scan = cfg.data.eval_max_samples if cap == -1 else cap, scan
        self.needs: list[int] = []
        self.most = 0  # the longest accepted answer of any record: what the decided budget covers

    def add(self, rec) -> None:
        if self.cap is not None and self.scan.answers >= self.cap:
            return
        # the encoder's reference: a last turn that calls tools is scored as the template writes the call
        refs = [r for r in [self.encoder.answer_text(rec), *rec.references] if r and r.strip()]
        if not refs:
            return
        self.scan.answers += 1
        counts = [len(self.tok(r.strip(), add_special_tokens=False)["input_ids"]) for r in refs]
        need = min(counts)
        self.needs.append(need)
        self.most = max(self.most, *counts)
        if need > self.scan.answer_longest[0]:
            self.scan.answer_longest = (need, rec.where())

    def finish(self) -> None:
        from ..resolve import generation_budget

        self.scan.answer_limit = generation_budget.budget_for(self.most) if self.decided else self.limit
        self.scan.answers_cut = sum(n > self.scan.answer_limit for n in self.needs)


class _Decoder:
    """Decodes the media of records that passed the header measure, as training decodes them."""

    def __init__(self, encoder, scan: SplitScan, *, inline: bool):
        self.encoder, self.scan, self.inline = encoder, scan, inline
        self.reservoir: list = []
        self.rng = random.Random(0)  # a fixed seed: the same sample on every run of the same data

    def add(self, rec) -> bool:
        """False when the record's media fail to decode (inline mode only; sampled ones count later)."""
        if not rec.media_parts():  # called only for records the header measure passed
            return True
        self.scan.media_records += 1
        if self.inline:
            return self._decode(rec)
        n = self.scan.media_records
        if len(self.reservoir) < DECODE_SAMPLE:
            self.reservoir.append(rec)
        else:
            j = self.rng.randrange(n)
            if j < DECODE_SAMPLE:
                self.reservoir[j] = rec
        return True

    def finish(self) -> None:
        for rec in self.reservoir:
            self._decode(rec)
        self.reservoir = []

    def _decode(self, rec) -> bool:
        from ..data.formats import BadRecord, isolated

        self.scan.decoded += 1
        try:
            # The encoder's own media loading (what `encode` runs in training), without the processor.
            with isolated(rec.where()):
                self.encoder._load_media(rec)
        except BadRecord as e:
            self.scan.decode_bad += 1
            self.scan.ok -= 1  # the header measure counted it ok
            self.scan.add_bad(e.reason, e.where or rec.where(), e.what, e.fix)
            return False
        return True


def _in_split(rows, fmt: str, wanted: str):
    from ..data.published import in_split

    return ((where, row) for where, row in rows if in_split(row, fmt, wanted))


def record_key(rec) -> int | None:
    """A record's identity for duplicate detection: every turn's role and text, its tool calls and the row's
    tool schemas (the same question under other tools is another record), and each media item's file (or
    bytes). None when a media item is an in-memory object with no file to name it."""
    import json

    from ..data.records import content_parts

    out = [json.dumps(rec.tools, sort_keys=True)] if getattr(rec, "tools", None) else []
    for m in rec.messages:
        out.append("\x1e" + str(m.get("role")))
        if m.get("tool_calls"):
            out.append(json.dumps(m["tool_calls"], sort_keys=True))
        for p in content_parts(m.get("content")):
            if p.get("type") == "text":
                out.append(" ".join(str(p.get("text", "")).split()))
            elif p.get("path") is not None:
                out.append(f"<{p['type']}:{p['path']}>")
            elif p.get("frames"):
                out.append(f"<{p['type']}:{'|'.join(map(str, p['frames']))}>")
            elif p.get("bytes") is not None:
                out.append(f"<{p['type']}#{hash(bytes(p['bytes']))}>")
            else:
                return None
    return hash("\x1f".join(out))


def _look_at_text(rec, scan: SplitScan, train_keys: set | None, seen: set | None = None) -> None:
    """Per-record text facts: a system turn (MM062), and the record's key for train/eval duplicates (MM061)
    and repeats inside the training split (MM068). (Special-token text is the encoder's "special token in
    text" bad record, MM060.)"""
    msgs = rec.messages
    h = hash(rec.id)
    if h in scan.id_hashes:
        scan.repeated_ids += 1
        if scan.repeated_ids == 1:
            scan.repeated_ids_first = rec.where()
    scan.id_hashes.add(h)
    if msgs and msgs[0].get("role") == "system":
        scan.system_records += 1
    roles = [m.get("role") for m in msgs]
    last_user = max((i for i, r in enumerate(roles) if r == "user"), default=-1)
    earlier = sum(1 for r in roles[:last_user] if r == "assistant")
    earlier += sum(1 for m in msgs[last_user + 1:-1] if m.get("tool_calls"))  # a call, then its result and more
    if earlier:
        scan.earlier_answers += earlier
        scan.earlier_answer_records += 1
        if scan.earlier_answer_records == 1:
            scan.earlier_answer_first = rec.where()
    if train_keys is None and seen is None:
        return
    key = record_key(rec)
    if key is None:
        return
    if seen is not None:
        if key in seen:
            scan.repeated += 1
            if scan.repeated == 1:
                scan.repeated_first = rec.where()
        else:
            seen.add(key)
    if train_keys is None:
        return
    if scan.split == "train":
        train_keys.add(key)
    elif key in train_keys:
        scan.leaked += 1
        if scan.leaked == 1:
            scan.leaked_first = rec.where()


def _round_up(n: int) -> int:
    return ((n + 255) // 256) * 256


def _untimed_video(part) -> bool:
    """A video whose frames carry no rate: a frames folder, listed frame files or in-memory frames (a file has its own)."""
    from pathlib import Path

    if part.get("video") is not None or part.get("frames"):
        return True
    return part.get("path") is not None and Path(part["path"]).is_dir()


def _video_rate(part, model_cfg, rec, scan: SplitScan) -> None:
    """The rate a video file's frames are taken at (frames sampled / the clip's seconds): uniform sampling of a
    short clip is fast (8 frames of 1 s: 8 fps). MM066 compares the fastest with the model's time axis."""
    from ..data import media_probe
    from ..errors import DataError

    try:
        total, seconds, _, _, rate = media_probe._video_file_header(part)
    except DataError:
        return  # a clip that cannot be read is MM018's
    if not seconds:
        return
    fps = model_cfg.video_fps
    n = media_probe.frames_by_fps(total, seconds, rate, model_cfg.video_frames, fps) if fps \
        else min(model_cfg.video_frames, total or model_cfg.video_frames)
    if n / seconds > scan.video_rate_max[0]:
        scan.video_rate_max = (n / seconds, rec.where())


def _audio_past_window(rec, window: float, scan: SplitScan) -> None:
    """Count the record's audio clips (files, and videos' own audio tracks) longer than the encoder's window
    (MM082): the processor keeps only their first `window` seconds. One header read per clip, only when the
    cap lets such clips in."""
    from ..data import media_probe
    from ..errors import DataError

    for p in rec.media_parts():
        # audio files, and videos whose own audio track is fed to the model (use_audio: Qwen2.5-Omni)
        if p.get("path") is None or not (p["type"] == "audio" or (p["type"] == "video" and p.get("use_audio"))):
            continue
        try:
            seconds = media_probe.audio_seconds(p)
        except DataError:
            continue  # a clip that cannot be read is MM018's, counted by the measure
        if seconds > window:
            scan.audio_over_window += 1
            if seconds > scan.audio_longest[0]:
                scan.audio_longest = (seconds, rec.where())


def _check_record(rec, encoder, max_len: int, scan: SplitScan) -> bool:
    """Measure one record through the training encoder; count it as ok or bad by the encoder's reason."""
    from ..data.formats import BadRecord

    kinds = sorted({p["type"] for p in rec.media_parts()})
    scan.signatures["+".join(kinds) or "text"] += 1
    for part in rec.media_parts():
        scan.modalities[part["type"]] += 1
        if part["type"] == "video" and _untimed_video(part):
            scan.untimed_videos += 1
            scan.untimed_first = scan.untimed_first or rec.where()
        elif part["type"] == "video" and part.get("path") is not None:
            _video_rate(part, encoder.cfg.model, rec, scan)
    from ..data.audio_in_video import add_kind

    add_kind(scan.video_audio, rec)  # videos with and without their audio track: one forward flag (MM033)
    where = rec.where()
    try:
        counts = encoder.measure(rec)
    except BadRecord as e:
        scan.add_bad(e.reason, e.where or where, e.what, e.fix)
        return False
    except DataError as e:  # a record the encoder cannot line up: reported as its own reason
        scan.add_bad("processor error", e.where or where, e.what, e.fix)
        return False
    total = counts["total"]
    media = total - counts["text"]
    scan.lengths.append(total)
    scan.media_tokens_max = max(scan.media_tokens_max, media)
    if total > scan.longest[0]:
        scan.longest = (total, where)
    if total > max_len:
        cut = "media tokens and the answer" if media else "the answer"
        scan.add_bad("too long", where, f"{total} tokens ({media} of them media) > data.max_length={max_len}: "
                     f"mmtune never truncates (it would cut {cut}); the record would be refused",
                     f"data.max_length={_round_up(total)}" + (" or model.max_pixels=<smaller>" if media else "")
                     + ", or data.on_bad_record=skip")
        return False
    scan.ok += 1
    observe(rec, encoder.processor, encoder.family, scan.boxes)
    return True


def _sources(spec, resolved):
    """(spec, resolved run, file tag) per source: a mixture (data.train as a list) is scanned source by
    source, each with its own format, columns and media root (the same resolved decisions otherwise)."""
    import dataclasses

    if not isinstance(spec, list):
        return [(spec, resolved, "")]
    from ..data.mixture import source_data_cfg

    cfg = resolved.cfg
    return [(s.path, dataclasses.replace(resolved, cfg=cfg.model_copy(update={"data": source_data_cfg(s, cfg.data)})),
             f".{s.name}") for s in spec]


def scan_dataset(resolved, *, limit=None, write_clean: Path | None = None, full: bool = False) -> DataScan:
    t0 = time.perf_counter()
    cfg = resolved.cfg
    result = DataScan()
    # Training records' keys, only when there is an eval split to compare (one int per record).
    train_keys: set | None = set() if cfg.data.train and cfg.data.eval else None
    if cfg.data.train:
        for spec, r, tag in _sources(cfg.data.train, resolved):
            clean = write_clean.with_name(write_clean.stem + tag + write_clean.suffix) if write_clean else None
            # A stream is sampled, never read whole: its first data.stream_sample rows (said in the table).
            sample = cfg.data.stream_sample if cfg.data.streaming and limit is None else None
            result.splits.append(scan_split("train", spec, r, limit=sample or limit, write_clean=clean, full=full,
                                            train_keys=train_keys))
            if sample is not None:
                result.splits[-1].sampled, result.splits[-1].sampled_by = sample, "data.streaming"
    evals = cfg.data.eval
    if isinstance(evals, list):  # as training reads it: a source that is one training file has no eval split
        from ..data.mixture import held_out_sources
        from ..data.records import RecordSet

        evals = held_out_sources(evals, cfg.data, RecordSet()) or None
    if evals:
        for spec, r, tag in _sources(evals, resolved):
            clean = write_clean.with_name(write_clean.stem + tag + ".eval" + write_clean.suffix) if write_clean else None
            result.splits.append(scan_split("eval", spec, r, limit=limit, write_clean=clean, full=full,
                                            train_keys=train_keys))
    if not result.splits:
        raise NotAvailable("no data.train or data.eval to scan")
    result.seconds = time.perf_counter() - t0
    return result


def _matches(spec: str) -> bool:
    """A glob pattern of data files that matches some (data/globs.py): a read error in them is the scan's own."""
    import glob

    from ..data.globs import is_pattern

    return is_pattern(spec) and bool(glob.glob(str(Path(spec).expanduser()), recursive=True))
