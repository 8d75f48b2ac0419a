"""Length-grouped micro-batches (data.group_by_length): less padding, same records, same on every rank,
a pure function of (seed, epoch, lengths) so resume needs no extra state."""

import random

from mmtune.data.batches import BatchStream, micro_batches_of_epoch


def _lengths(n, seed=0):
    rng = random.Random(seed)
    return [rng.randint(40, 200) for _ in range(n)]  # a 5x spread, as in the benchmark


def _padding(batches, lengths):
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return 1 - real / padded


def test_grouping_cuts_padding_and_keeps_the_records_of_the_epoch():
    lengths = _lengths(1000)
    plain = micro_batches_of_epoch(1000, seed=1, epoch=0, micro_batch_size=8)
    grouped = micro_batches_of_epoch(1000, seed=1, epoch=0, micro_batch_size=8, lengths=lengths)
    assert len(grouped) == len(plain)
    assert all(len(b) == 8 for b in grouped)
    flat = [i for b in grouped for i in b]
    assert len(set(flat)) == len(flat)  # no record twice in an epoch
    assert _padding(grouped, lengths) < _padding(plain, lengths) / 4, (_padding(grouped, lengths),
                                                                     _padding(plain, lengths))
    # the batch with the longest record comes first: an out-of-memory shows at step 1
    assert max(lengths[i] for i in grouped[0]) == max(lengths[i] for i in flat)
    # shuffled, not sorted: the batches' lengths do not simply decrease
    tops = [max(lengths[i] for i in b) for b in grouped[1:]]
    assert tops != sorted(tops, reverse=True)


def test_grouping_is_deterministic_per_epoch_and_differs_between_epochs():
    lengths = _lengths(300, seed=2)
    a = micro_batches_of_epoch(300, seed=5, epoch=0, micro_batch_size=4, lengths=lengths)
    assert a == micro_batches_of_epoch(300, seed=5, epoch=0, micro_batch_size=4, lengths=list(lengths))
    assert a != micro_batches_of_epoch(300, seed=5, epoch=1, micro_batch_size=4, lengths=lengths)


def test_ranks_share_each_step_disjointly_with_similar_lengths():
    lengths = _lengths(403, seed=3)
    world, mbs = 3, 4
    per_rank = [micro_batches_of_epoch(403, seed=0, epoch=0, micro_batch_size=mbs, rank=r, world_size=world,
                                       lengths=lengths) for r in range(world)]
    plain = micro_batches_of_epoch(403, seed=0, epoch=0, micro_batch_size=mbs, rank=0, world_size=world)
    assert {len(b) for b in per_rank} == {len(plain)}  # every rank does as many steps as ungrouped
    for step in zip(*per_rank):
        ids = [i for b in step for i in b]
        assert len(set(ids)) == world * mbs
    flat = [i for r in per_rank for b in r for i in b]
    assert len(set(flat)) == len(flat)
    # one step's records across all ranks came from one sorted window: the step's spread is small
    spreads = [max(lengths[i] for b in step for i in b) - min(lengths[i] for b in step for i in b)
               for step in zip(*per_rank)]
    assert sum(spreads) / len(spreads) < 0.1 * (max(lengths) - min(lengths))


def test_grouped_stream_resumes_mid_epoch_identically():
    lengths = _lengths(50, seed=4)
    full = BatchStream(50, seed=3, micro_batch_size=4, lengths=lengths)
    expected = [full.next() for _ in range(30)]  # crosses two epoch boundaries
    part = BatchStream(50, seed=3, micro_batch_size=4, lengths=lengths)
    head = [part.next() for _ in range(17)]
    resumed = BatchStream(50, seed=3, micro_batch_size=4, lengths=lengths, **part.position())
    assert head + [resumed.next() for _ in range(13)] == expected
