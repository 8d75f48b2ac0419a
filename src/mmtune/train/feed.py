"""The loop's micro-batches: records encoded as drawn (cached while data.cache_mb lasts), collated with
the bad ones set apart, drawn in the BatchStream's order through the run's DataLoader (or a stream's own
cursor), and the start-up check that ran beside training merged in when it is done."""

from __future__ import annotations

from ..console import console
from ..data.batches import BatchStream
from ..errors import MMTuneError


class EncodedDataset:
    """Records encoded when first drawn and kept in the run's cache while data.cache_mb lasts
    (data/encode_cache.py), served from it after that; past the budget, encoded on each draw (in
    DataLoader workers when train.num_workers > 0, each filling its own copy of the cache). The DataLoader
    asks for a micro-batch's records at once (`__getitems__`): its cache misses are encoded together, one
    processor call for all of them (data/encode_batch.py), as a plain transformers loop does. Records were
    only measured at start-up, so a media file that fails to decode now is a bad record found late: it comes
    back as `{BAD: (index, source, reason, what, fix)}` for the loop to handle by data.on_bad_record, never a
    crash inside a worker."""

    def __init__(self, records, encoder, cache=None, aux_losses=(), loss_groups=()):
        self.records, self.encoder, self.cache, self.aux_losses = records, encoder, cache, tuple(aux_losses)
        self.loss_groups = tuple(loss_groups)  # a run mixing modalities: each record's group (data/modality.py)

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: list[int]) -> list[dict]:
        from ..data.encode_batch import encode_many
        from ..data.encode_cache import key
        from ..data.formats import BadRecord

        out: list = [None] * len(indices)
        misses = []
        for slot, i in enumerate(indices):
            hit = self.cache.get(key(self.records[i])) if self.cache is not None else None
            if hit is not None:
                out[slot] = dict(hit)  # the cache's own entry stays as it is
            else:
                misses.append(slot)
        encoded = encode_many(self.encoder, [self.records[indices[s]] for s in misses])
        for slot, enc in zip(misses, encoded):
            i, r = indices[slot], self.records[indices[slot]]
            if isinstance(enc, BadRecord):
                out[slot] = {BAD: (i, r.source, enc.reason, enc.what, enc.fix)}
                continue
            if self.cache is not None and not self.cache.full:
                self.cache.put(key(r), enc)  # packed copies: `enc` itself goes on unchanged
            out[slot] = enc
        for slot, i in enumerate(indices):
            if self.aux_losses and BAD not in out[slot]:
                for loss in self.aux_losses:  # each auxiliary loss's per-record targets (aux_* keys)
                    out[slot].update(loss.record_inputs(self.records[i], out[slot]))
            if self.loss_groups and BAD not in out[slot]:  # added after the cache: its entries stay as they were
                from ..data.modality import group_input

                out[slot].update(group_input(self.records[i], out[slot], self.loss_groups))
        return out


BAD = "_bad_record"


class SkippingCollator:
    """The run's collator over the good records of a micro-batch; bad ones are listed under BAD."""

    def __init__(self, collator):
        self.collator = collator

    def __call__(self, items):
        # A packed row (data.packing) lists its bad records under BAD next to its good ones.
        good = [{k: v for k, v in it.items() if k != BAD} for it in items if set(it) - {BAD}]
        batch = self.collator(good) if good else {}
        batch[BAD] = [b for it in items if BAD in it for b in (it[BAD] if isinstance(it[BAD], list) else [it[BAD]])]
        return batch


class _FromStream:
    """A batch sampler that reads a *copy* of the stream, so the loader may prefetch ahead."""

    def __init__(self, stream_args: dict):
        self.args = stream_args

    def __iter__(self):
        s = BatchStream(**self.args)
        while True:
            yield s.next()


def open_feed(run, position: dict, aux_losses=()):
    """(cursor, loader) from the resume position: the cursor says which records come next and is the
    position a checkpoint saves; the loader yields their collated micro-batches (None for a stream, whose
    cursor reads and encodes them itself)."""
    cfg, acc = run.cfg, run.accelerator
    if cfg.data.streaming:  # records read as drawn, never all in memory (data/streaming.py): its own cursor
        from ..data.streaming import StreamingBatches

        return StreamingBatches(run, position, aux_losses), None
    lengths = [x["total"] for x in run.train_lengths] if cfg.data.group_by_length or cfg.data.packing else None
    stream_args = dict(n=len(run.train_set.records), seed=cfg.train.seed, micro_batch_size=cfg.train.micro_batch_size,
                       rank=acc.process_index, world_size=acc.num_processes, lengths=lengths,
                       pack=cfg.data.max_length if cfg.data.packing else None,
                       epoch=position["epoch"], index=position["index"])  # a stream's position has more
    cursor = BatchStream(**stream_args)  # advances only as micro-batches are consumed: the resume position
    return cursor, _micro_batch_loader(run, stream_args, aux_losses)


def _micro_batch_loader(run, stream_args: dict, aux_losses=()):
    from ..data.collate import make_dataloader

    # The objective's encoder and collator (a dpo pair: both sides; data/preference.py), the run's for sft.
    dataset = EncodedDataset(run.train_set.records, run.train_encoder, run.encode_cache, aux_losses,
                             getattr(run, "loss_groups", ()))
    if run.cfg.data.packing:  # the sampler yields rows of records; the loader packs them (data/packing.py)
        from ..compat.rope_index import rope_index_of
        from ..data.packing import PackedRows, joins_rows

        dataset = PackedRows(dataset, rope_index_of(run.unwrapped_model()), bad_key=BAD,
                             join=joins_rows(run.resolved.attn_implementation))
    collate, plan = SkippingCollator(run.train_collator), run.resolved.loader
    by_value = getattr(plan, "by_value", False)  # a CPU run's workers (data/workers.py: LoaderPlan.by_value)
    if by_value:
        from ..data.workers import ByValue, received

        collate = ByValue(collate, plan.by_value_limit)
    loader = iter(make_dataloader(dataset, collate, _FromStream(stream_args), plan=plan, seed=run.cfg.train.seed))
    if by_value:
        loader = (received(mb) for mb in loader)
    depth = getattr(plan, "thread_prefetch", 0)
    if depth:  # train.prefetch: the next step's micro-batches encoded beside this step (train/prefetch.py)
        from .prefetch import Prefetched

        return Prefetched(loader, depth, in_backward=plan.thread_in_backward)
    return loader


def settle(loader) -> None:
    """Before anything else in this process uses the processor (evaluation, a checkpoint's processor
    files): a prefetching loader's thread finishes what it is encoding (its micro-batches stay queued)."""
    if hasattr(loader, "settle"):
        loader.settle()


def close(loader) -> None:
    """The end of this process's training: a prefetching loader's thread finishes and stops."""
    if hasattr(loader, "close"):
        loader.close()


def next_micro_batch(run, cursor, loader, late_bad: set) -> tuple[list[int], dict]:
    """The next micro-batch with at least one good record. A record found bad only now (its media
    failed to decode after the start-up header check) follows data.on_bad_record: "error" stops with
    the record named; "skip" counts it once (summary.json `skipped_records`) and trains on the rest."""
    from ..errors import DataError

    while True:
        ids, mb = cursor.next(), next(loader)
        for i, source, reason, what, fix in mb.pop(BAD):
            if run.cfg.data.on_bad_record == "error":
                how = ("the start-up check runs beside training" if getattr(run, "startup_check", None) else
                       "the start-up check reads media headers only")
                raise DataError(f"{what} (found while training: {how})",
                                where=source, fix=(f"{fix}; or " if fix else "") + "data.on_bad_record=skip to count "
                                "and skip such records; the run resumes from its last checkpoint")
            if i not in late_bad:
                late_bad.add(i)
                run.train_set.skip(source, reason, what)
        if len(late_bad) == len(run.train_set.records):  # else this would wait forever for a good one
            raise DataError("every training record failed to encode while training", where=str(run.cfg.data.train),
                            fix="see skipped_records in summary.json or `mmtune data inspect CONFIG`")
        if mb:
            return ids, mb


def merge_check(run, check, late_bad: set, sinks, step: int, scale: dict) -> dict:
    """The start-up check that ran beside training is done: its first bad record stops the run under
    data.on_bad_record=error; else its bad records are counted (each once: a record the loop already found
    bad when it drew it is not counted again, and is not counted again if drawn later), its lengths become
    the run's, and the report is logged (console and metrics.jsonl) and kept for summary.json."""
    from ..data.inspect import Scan
    from ..data.records import RecordSet
    from ..errors import DataError

    try:
        report = check.wait()
    except Exception as e:  # the check itself broke (a worker killed, out of memory): say so, with the way round
        raise MMTuneError(f"the start-up check of the training records, running beside training, failed: "
                          f"{type(e).__name__}: {e}", where=str(run.cfg.data.train),
                          fix="data.startup_scan=before runs it in this process before step 1; the run resumes "
                              "from its last checkpoint") from None
    if report.error is not None:
        e = report.error
        raise DataError(f"{e.what} (found by the start-up check running beside training, after step {step})",
                        where=e.where, fix=(e.fix + "; " if e.fix else "") + "the run resumes from its last checkpoint")
    found = {}
    for i, (source, reason, what, _fix) in sorted(report.bad.items()):
        found[reason] = found.get(reason, 0) + 1
        if i not in late_bad:
            late_bad.add(i)
            run.train_set.skip(source, reason, what)
    if not report.lengths:
        raise DataError(f"no usable training record ({dict(run.train_set.skipped)} skipped)",
                        where=str(run.cfg.data.train), fix="see `mmtune data inspect CONFIG` for the reasons")
    run.train_lengths = report.kept_lengths()
    run.train_ok = [run.train_set.records[i] for i in sorted(report.lengths)]
    run.startup.update(train_records_measured=len(report.lengths), train_check_s=report.seconds)
    from .summary import batch_scale

    scale.update(batch_scale(run))  # tokens per step, from the lengths now known
    out = {"when": "beside training", "finished": True, "records": report.records, "ok": len(report.lengths),
           "skipped": found, "seconds": report.seconds, "processes": report.processes, "merged_at_step": step,
           "waited_at_step": check.waited_at_step,
           "tokens": Scan(RecordSet(), lengths=run.train_lengths).distribution()}
    sinks.log(step, out, kind="startup_check")
    console.print(f"start-up check done (beside training, {report.seconds:g} s): {out['ok']:,} of {report.records:,} "
                  f"records ok" + (f", skipped {found}" if found else "") + f"; tokens max {out['tokens']['total']['max']}, "
                  f"p95 {out['tokens']['total']['p95']}, mean {out['tokens']['total']['mean']}")
    return out


def flat_indices(batch: list) -> list[int]:
    """A micro-batch's record indices (a packed micro-batch is a list of rows of indices)."""
    return [i for x in batch for i in (x if isinstance(x, list) else [x])]
