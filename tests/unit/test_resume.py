"""A restart reads from the ledger's position (or the batch it replays), never from the run's first offsets."""

from tailfill.lake.ledger import Ledger
from tailfill.offsets import OffsetRange, PartitionOffsets, TopicPartition
from tailfill.run.plan import resume_at

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)


def offsets(p0: int, p1: int) -> PartitionOffsets:
    return PartitionOffsets({P0: p0, P1: p1})


def test_a_restart_reads_from_the_end_of_what_the_ledger_holds_from_its_start():
    ledger = Ledger([OffsetRange("t", 0, 0, 12_370), OffsetRange("t", 1, 0, 250)])
    assert resume_at(ledger, offsets(0, 0), None) == offsets(12_370, 250)


def test_a_gap_in_the_ledger_is_read_and_offsets_past_it_are_left_to_the_commit():
    ledger = Ledger([OffsetRange("t", 0, 0, 100), OffsetRange("t", 0, 200, 300)])
    assert resume_at(ledger, offsets(0, 40), None) == offsets(100, 40)


def test_the_batch_being_replayed_is_where_a_restart_reads_when_nothing_past_it_is_committed():
    ledger = Ledger([OffsetRange("t", 0, 0, 1_000)])
    assert resume_at(ledger, offsets(1_000, 7), offsets(5_000, 5_000)) == offsets(1_000, 7)


def test_a_bounded_request_never_resumes_past_its_end():
    ledger = Ledger([OffsetRange("t", 0, 0, 9_000), OffsetRange("t", 1, 0, 9_000)])
    assert resume_at(ledger, offsets(0, 0), offsets(5_000, 9_000)) == offsets(5_000, 9_000)
