"""The start-up scan's encodings, reused by the loop: exact, compact, within the budget, and the
lengths the loop sees are the lengths `Encoder.measure` reports for the records past the budget."""

import pytest
import torch

from mmtune.data.collate import Collator
from mmtune.data.encode_cache import EncodeCache, key
from mmtune.data.inspect import scan_records
from mmtune.data.records import Record, RecordSet

from .conftest import write_png


def _records(folder, n):
    out = []
    for i in range(n):
        img = write_png(folder / f"i{i}.png", colour=(10 * i, 50, 90), size=(40 + 12 * i, 48))
        out.append(Record(f"r{i}", f"data.jsonl:{i + 1}", [
            {"role": "user", "content": [{"type": "image", "path": str(img)},
                                         {"type": "text", "text": "How many?" + " really" * i}]},
            {"role": "assistant", "content": [{"type": "text", "text": str(i)}]}]))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_cached_encoding_collates_bit_identical_to_a_fresh_one(encoder, tmp_path, dtype):
    r = _records(tmp_path, 1)[0]
    cache = EncodeCache(2**30, dtype)
    assert cache.put(key(r), encoder.encode(r))
    collate = Collator(0, dtype)
    fresh, cached = collate([encoder.encode(r)]), collate([cache.get(key(r))])
    assert fresh.keys() == cached.keys()
    for k in fresh:
        assert fresh[k].dtype == cached[k].dtype, k
        assert torch.equal(fresh[k], cached[k]), k
    raw = sum(v.numel() * v.element_size() for v in encoder.encode(r).values())
    assert cache.nbytes < raw  # ids as int32 (and, in bf16 runs, pixels in bf16)
    cache.get(key(r))["input_ids"][0] = -1  # what the loop is given is its own
    assert torch.equal(cache.get(key(r))["input_ids"], encoder.encode(r)["input_ids"])


def test_scan_fills_the_cache_up_to_the_budget_then_measures(encoder, tmp_path):
    records = _records(tmp_path, 6)
    sizes = [sum(v.numel() * v.element_size() for v in EncodeCache(2**30)._pack_all(encoder.encode(r)))
             for r in records]
    cache = EncodeCache(sizes[0] + sizes[1] + sizes[2] // 2)
    with_cache = scan_records(RecordSet(records=list(records)), encoder, "error", cache=cache)
    plain = scan_records(RecordSet(records=list(records)), encoder, "error")
    assert len(cache) == 2 and cache.full
    assert [key(r) in cache for r in records] == [True, True, False, False, False, False]
    assert with_cache.records.records == plain.records.records
    assert with_cache.lengths == plain.lengths  # measured lengths == encoded lengths
    assert len({x["total"] for x in plain.lengths}) == 6


def test_a_bad_record_is_not_cached_and_counted_under_skip(encoder, tmp_path):
    good, bad = _records(tmp_path, 2)
    (tmp_path / "i1.png").write_bytes(b"not a png")
    cache = EncodeCache(2**30)
    scan = scan_records(RecordSet(records=[good, bad]), encoder, "skip", cache=cache)
    assert scan.records.records == [good] and len(cache) == 1 and key(bad) not in cache
    assert sum(scan.records.skipped.values()) == 1
