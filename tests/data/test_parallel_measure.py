"""The start-up check's measuring split over spawned processes: the same kept records, lengths, skip
counts and first error as one process, in the same order; processes only where they pay."""

import pytest

from mmtune.data.inspect import scan_records
from mmtune.data.parallel_measure import RECORDS_PER_PROCESS, processes_for
from mmtune.data.records import Record, RecordSet
from mmtune.errors import DataError

from .conftest import write_png


def _records(folder, n):
    imgs = [write_png(folder / f"i{j}.png", colour=(10 * j, 50, 90), size=(40 + 12 * j, 48)) for j in range(4)]
    out = []
    for i in range(n):
        path = folder / "gone.png" if i in (5, 17) else imgs[i % 4]  # two records whose image is missing
        out.append(Record(f"r{i}", f"data.jsonl:{i + 1}", [
            {"role": "user", "content": [{"type": "image", "path": str(path)},
                                         {"type": "text", "text": "How many?" + " really" * (i % 7)}]},
            {"role": "assistant", "content": [{"type": "text", "text": str(i)}]}]))
    return out


def test_parallel_scan_equals_the_serial_scan(encoder, tmp_path):
    records = _records(tmp_path, 40)
    records += records[:6]  # a mixture repeats records: still measured once each
    serial = scan_records(RecordSet(records=list(records)), encoder, "skip", encode=False)
    parallel = scan_records(RecordSet(records=list(records)), encoder, "skip", encode=False, processes=2)
    assert [r.source for r in parallel.records.records] == [r.source for r in serial.records.records]
    assert parallel.lengths == serial.lengths and len(serial.lengths) == 46 - 3
    assert parallel.records.skipped == serial.records.skipped == {"missing media": 3}
    assert parallel.records.problems == serial.records.problems

    with pytest.raises(DataError) as one:
        scan_records(RecordSet(records=list(records)), encoder, "error", encode=False)
    with pytest.raises(DataError) as two:
        scan_records(RecordSet(records=list(records)), encoder, "error", encode=False, processes=2)
    assert (two.value.what, two.value.where, two.value.fix) == (one.value.what, one.value.where, one.value.fix)
    assert "data.jsonl:6" in two.value.where


def test_processes_only_where_they_pay():
    assert processes_for(20_000, cpus=2) == 1
    assert processes_for(2 * RECORDS_PER_PROCESS, cpus=2) == 2
    assert processes_for(10 * RECORDS_PER_PROCESS, cpus=2) == 2
    assert processes_for(10 * RECORDS_PER_PROCESS, cpus=1) == 1
