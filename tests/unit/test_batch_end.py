"""A bounded request's batches, planned one after the other with ``batch_end``: they cover its bounds exactly."""

import random

import pytest

from tailfill.offsets import PartitionOffsets, TopicPartition, ranges_between, total
from tailfill.source.spark_reader import batch_end

TPS = [TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)]


def offsets(*values: int) -> PartitionOffsets:
    return PartitionOffsets(dict(zip(TPS, values, strict=True)))


@pytest.mark.parametrize("seed", range(20))
def test_batches_cover_the_bounds_once_each_within_its_budget(seed):
    rng = random.Random(seed)
    start = offsets(*(rng.randrange(0, 1_000) for _ in TPS))
    end = PartitionOffsets({tp: start[tp] + rng.randrange(0, 5_000) for tp in TPS})
    budget = rng.randrange(1, 3_000)
    seen, at, batches = set(), start, 0
    while (nxt := batch_end(at, end, budget)) != at:
        batch = ranges_between(at, nxt)
        assert total(batch) <= max(budget, len(TPS)), "a batch over its budget"
        for r in batch:
            assert r.start >= at[r.tp] and r.end <= end[r.tp]
            covered = {(r.tp, o) for o in range(r.start, r.end)}
            assert not covered & seen, "an offset in two batches"
            seen |= covered
        at, batches = nxt, batches + 1
        assert batches <= 10_000
    assert at == end
    assert len(seen) == total(ranges_between(start, end))


def test_without_a_budget_one_batch_reads_to_the_end():
    assert batch_end(offsets(0, 5, 7), offsets(100, 5, 9), None) == offsets(100, 5, 9)


def test_a_partition_already_past_its_end_reads_nothing_and_stays():
    assert batch_end(offsets(50, 0, 0), offsets(10, 20, 0), 1_000) == offsets(50, 20, 0)


def test_a_held_query_plans_no_batch_whatever_budget_its_writer_hands_over(tmp_path):
    from tailfill.source.handoff import Budget, hold, release

    budget_file = tmp_path / "budget.json"
    Budget(500).write(budget_file)
    hold(budget_file)  # the query is being stopped
    Budget(2_000).write(budget_file)  # the batch in flight ends and sizes the next one
    start, end = offsets(0, 0, 0), offsets(1_000, 1_000, 1_000)
    assert batch_end(start, end, Budget.read(budget_file).max_offsets) == start  # nothing to read: no batch
    release(budget_file)  # restarted after a stall: batches again
    assert 0 < total(ranges_between(start, batch_end(start, end, Budget.read(budget_file).max_offsets))) <= 2_000
