"""What a replay covers: committed offsets only, lost ones left out, batches of one range per partition,
and a refusal naming the first offset the broker no longer has."""

import pytest

from tailfill.errors import ReplayExpiredError
from tailfill.lake.ledger import Ledger
from tailfill.offsets import OffsetRange, PartitionOffsets, TopicPartition, by_partition, merge, total
from tailfill.run.replay_plan import check_on_broker, replay_batches, split_committed


def R(start, end, partition=0, topic="t"):
    return OffsetRange(topic, partition, start, end)


def test_only_committed_offsets_are_replayed_the_rest_is_named():
    ledger = Ledger(committed=[R(0, 100), R(0, 40, 1)], lost=[R(0, 10, 1)])
    todo, uncommitted, lost = split_committed([R(50, 150), R(0, 60, 1)], ledger)
    assert todo == [R(50, 100), R(10, 40, 1)]
    assert uncommitted == [R(100, 150), R(40, 60, 1)]
    assert lost == [R(0, 10, 1)]


def test_a_range_wholly_uncommitted_leaves_nothing_to_replay():
    todo, uncommitted, _ = split_committed([R(200, 300)], Ledger(committed=[R(0, 100)]))
    assert todo == [] and uncommitted == [R(200, 300)]


def test_batches_hold_one_range_per_partition_and_cover_each_offset_once():
    ranges = [R(0, 25), R(30, 40), R(0, 7, 1)]
    batches = replay_batches(ranges, 10)
    for batch in batches:
        assert total(batch) <= 10 + len(batch)  # cap's floor: each partition advances by one at least
        assert all(len(rs) == 1 for rs in by_partition(batch).values())
    flat = [r for b in batches for r in b]
    assert merge(flat) == merge(ranges) and total(flat) == total(ranges)


def test_offsets_below_the_brokers_earliest_are_refused_naming_the_first_missing():
    low = PartitionOffsets({TopicPartition("t", 0): 0, TopicPartition("t", 1): 500})
    check_on_broker([R(0, 100), R(500, 900, 1)], low, "127.0.0.1:9092")  # all there
    with pytest.raises(ReplayExpiredError) as err:
        check_on_broker([R(0, 100), R(120, 900, 1)], low, "127.0.0.1:9092")
    message = str(err.value)
    assert "\n" not in message
    for part in ("topic t partition 1", "offset 120 is no longer on 127.0.0.1:9092", "earliest available is 500",
                 "nothing was written"):
        assert part in message, f"{part!r} not in {message!r}"
