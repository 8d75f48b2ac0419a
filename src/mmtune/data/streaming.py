"""data.streaming: training records read as the loop needs them, never all held in memory.

Rows come from a lazy reader (JSONL line by line, CSV row by row, parquet batch by batch, `datasets`'
`streaming=True` for Hub ids and dataset folders, a save_to_disk folder row by row from its
memory-mapped Arrow files), pass through a seeded shuffle buffer, become records (data.format,
data.on_bad_record as they come; a raw-text document becomes its windows of data.max_length, text_windows.py,
as in memory) and are dealt round-robin: each global micro-batch is the next
micro_batch_size x world_size records, and rank r takes every world_size-th one starting at r (the same
stream on every rank, so no rank waits for another).

The position is exact and world-size free: rows drawn out of the shuffle buffer in this epoch, and how
many records of the last row were dealt. The buffer is not saved: its draws depend only on (seed, epoch,
row count), so resume re-reads the first rows *without* converting or encoding them and rebuilds the
buffer exactly as it was. A stream that runs out drops its ragged tail (as the in-memory epoch does) and
starts its next epoch, reshuffled.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from ..errors import ConfigError, DataError


def shuffle_buffer(rows: Iterator, size: int, rng: random.Random) -> Iterator:
    """Rows in a shuffled order, holding at most `size`: each new row takes the place of a random one,
    which is given out; at the end the rest come out shuffled. The draws depend only on the count of rows
    seen, so replaying the same rows with the same seed gives the same order."""
    buf: list = []
    for row in rows:
        if len(buf) < size:
            buf.append(row)
            continue
        j = rng.randrange(size)
        out, buf[j] = buf[j], row
        yield out
    rng.shuffle(buf)
    yield from buf


def sample_records(spec: str, data_cfg, split: str = "train"):
    """The first data.stream_sample records of the stream, unshuffled, as a RecordSet (the start-up check,
    `mmtune data inspect` and the planner read these instead of the whole set)."""
    from .records import RecordSet

    k = data_cfg.stream_sample
    reader = _RecordReader(spec, data_cfg, split)
    rs = RecordSet()
    for where, row in reader.rows:
        if len(rs.records) >= k:
            break
        rs.records.extend(reader.convert(where, row, rs))
    rs.records = rs.records[:k]
    rs.notes.append(f"data.streaming: the first {len(rs.records)} records of {spec} (data.stream_sample={k}) "
                    "were read for this check, not the whole set")
    if not rs.records:
        raise DataError(f"no usable records in the first rows of {spec} ({rs.summary()})", where=spec,
                        fix="check the file and data.format" + (f"; first problem: {rs.problems[0]}" if rs.problems else ""))
    return rs


class _RecordReader:
    """One pass over a source's rows (one_source.open_source, read lazily under data.streaming), turning a row
    into its records the way load_source does."""

    def __init__(self, spec: str, data_cfg, split: str):
        from .one_source import open_source

        if getattr(data_cfg, "dataset_info", None):
            raise ConfigError("data.streaming=true with data.dataset_info: registry entries are read whole",
                              where="data.streaming", fix="point data.train at the data file or folder itself")
        self.cfg = data_cfg
        self.source = open_source(spec, data_cfg, split)
        self.rows = self.source.rows
        self.index = 0

    def convert(self, where: str, row, skipped) -> list:
        """The row's records; a bad row raises (data.on_bad_record=error) or is counted in `skipped`."""
        from .formats import BadRecord

        self.index += 1
        try:
            return self.source.records(where, row, self.index - 1)
        except BadRecord as e:
            skipped.bad(e, where, self.cfg.on_bad_record)
            return []


class RecordStream:
    """This rank's records, micro-batch by micro-batch, from a shuffled stream; resumable from position()."""

    def __init__(self, spec: str, data_cfg, *, seed: int, micro_batch_size: int, rank: int = 0, world_size: int = 1,
                 skipped=None, position: dict | None = None, encoder=None):
        from .records import RecordSet

        # encoder: cuts raw-text documents into their windows as they are drawn (without it a document over
        # data.max_length would reach the encoder uncut and be refused as "too long" mid-run, after the start-up
        # check, which cuts its sample, had passed). The windows of a row are its records: `taken` counts them.
        self.spec, self.cfg, self.seed, self.encoder = spec, data_cfg, seed, encoder
        self.mbs, self.rank, self.world = micro_batch_size, rank, world_size
        self.skipped = skipped if skipped is not None else RecordSet()
        pos = position or {}
        self.epoch, self.index = pos.get("epoch", 0), pos.get("index", 0)
        for reason, n in (pos.get("skipped") or {}).items():  # bad records counted before the checkpoint
            self.skipped.skipped[reason] = n
        self.records_read = pos.get("records_read", 0)
        self._open(rows_done=pos.get("rows", 0), taken=pos.get("taken", 0))

    def _open(self, rows_done: int = 0, taken: int = 0) -> None:
        self._reader = _RecordReader(self.spec, self.cfg, "train")
        self._rows = shuffle_buffer(self._reader.rows, self.cfg.shuffle_buffer,
                                    random.Random(f"stream:{self.seed}:{self.epoch}"))
        self.rows, self.taken, self._pending = 0, 0, []
        self._dealt_this_epoch = rows_done > 0
        # Resume: the rows already drawn are read again, not converted (the buffer's state is rebuilt by
        # replaying its draws), then the last one's records already dealt are dropped.
        for _ in range(max(0, rows_done - 1)):
            next(self._rows)
            self.rows += 1
        if rows_done:
            self._pending = self._convert(next(self._rows))
            self.rows += 1
            self.taken = min(taken, len(self._pending))
            self._pending = self._pending[self.taken:]

    def _convert(self, item) -> list:
        where, row = item
        records = self._reader.convert(where, row, self.skipped)
        if self.encoder is None or not any(r.document for r in records):
            return records
        from .formats import BadRecord, isolated
        from .text_windows import windows_of

        out = []
        for r in records:
            try:
                with isolated(r.where()):
                    out.extend(windows_of(r, self.encoder))
            except BadRecord as e:  # a turn token in the document's text
                self.skipped.bad(e, r.source, self.cfg.on_bad_record)
        return out

    def _next_record(self):
        while not self._pending:
            item = next(self._rows, None)
            if item is None:
                return None
            self.rows, self.taken = self.rows + 1, 0
            self._pending = self._convert(item)
        self.taken += 1
        return self._pending.pop(0)

    def next_records(self) -> list:
        """This rank's records of the next global micro-batch (micro_batch_size x world_size records)."""
        need = self.mbs * self.world
        got: list = []
        while len(got) < need:
            r = self._next_record()
            if r is not None:
                got.append(r)
                continue
            if not self._dealt_this_epoch:
                raise ConfigError(f"the stream {self.spec} has {len(got)} usable records, fewer than one micro-batch "
                                  f"per process ({self.mbs} x {self.world})", where="train.micro_batch_size",
                                  fix=f"train.micro_batch_size={max(1, len(got) // self.world)} or add data")
            self.epoch, self.index = self.epoch + 1, 0  # the ragged tail is dropped, as in memory
            self._open()
            got = []
        self._dealt_this_epoch = True
        self.index += 1
        self.records_read += need
        return got[self.rank::self.world]

    def position(self) -> dict:
        return {"epoch": self.epoch, "index": self.index, "rows": self.rows, "taken": self.taken,
                "records_read": self.records_read, "skipped": dict(self.skipped.skipped)}


class StreamingBatches:
    """The loop's micro-batches under data.streaming: records from a RecordStream, encoded in this process
    and collated. A record that fails to encode follows data.on_bad_record (counted in run.train_set)."""

    def __init__(self, run, position: dict, aux_losses=()):
        cfg = run.cfg
        self.run, self.aux = run, tuple(aux_losses)
        self.stream = RecordStream(cfg.data.train, cfg.data, seed=cfg.train.seed,
                                   micro_batch_size=cfg.train.micro_batch_size, rank=run.accelerator.process_index,
                                   world_size=run.accelerator.num_processes, skipped=run.train_set, position=position,
                                   encoder=run.encoder)

    @property
    def epoch(self) -> int:
        return self.stream.epoch

    @property
    def records_read(self) -> int:
        return self.stream.records_read

    def position(self) -> dict:
        return self.stream.position()

    def next_micro_batch(self) -> tuple[list[str], dict]:
        """(the records' ids, the collated micro-batch) with at least one good record."""
        from .formats import BadRecord

        while True:
            ids, items = [], []
            for r in self.stream.next_records():
                try:
                    encoded = self.run.encoder.encode(r)
                except BadRecord as e:
                    self.run.train_set.bad(e, r.source, self.run.cfg.data.on_bad_record)
                    continue
                for loss in self.aux:
                    encoded.update(loss.record_inputs(r, encoded))
                ids.append(r.id)
                items.append(encoded)
            if items:
                return ids, self.run.collator(items)
