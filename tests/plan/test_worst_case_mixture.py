"""The plan's worst-case record over a mixture: every distinct record measured once, however many
samples the mixture draws from it (seed 002: 100,000 samples of a few dozen look-alike records)."""

from pathlib import Path

from mmtune.config import load_config

PUBLISHED = Path(__file__).resolve().parents[2] / "recipes" / "data" / "published"
SOURCES = (f'data.train=[{{path: "{PUBLISHED}/chartqa/ChartQA Dataset", format: chartqa, weight: 0.4}}, '
           f'{{path: "{PUBLISHED}/infovqa", format: infovqa, weight: 0.3}}, '
           f'{{path: "{PUBLISHED}/ocrvqa/dataset.json", format: ocrvqa, weight: 0.3}}]')


def test_a_large_mixture_is_scanned_by_distinct_record():
    from mmtune.data.encode import Encoder
    from mmtune.data.sources import load_records
    from mmtune.plan.batch import worst_case_batch
    from mmtune.resolve import resolve_here

    resolved = resolve_here(load_config(None, ["model.name=tiny/llava-onevision", SOURCES, "data.mixture_size=20000",
                                               "data.max_length=4096", "train.micro_batch_size=2"]))
    pb = worst_case_batch(resolved, max_records=10_000)
    samples = load_records(resolved.cfg.data.train, resolved.cfg.data, split="train").records
    distinct = {(r.source, r.id): r for r in samples}
    assert len(samples) == 20000 and pb.records_seen == len(distinct) < 100
    enc = Encoder.for_run(resolved)
    assert pb.tokens == max(enc.measure(r)["total"] for r in distinct.values())  # all of them, not a prefix
    assert "mixture chartqa + infovqa + ocrvqa" in pb.source and "20000 samples" in pb.source
    assert pb.micro_batch["input_ids"].shape == (2, pb.tokens)
