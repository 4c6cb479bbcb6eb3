"""The one batch-summary type: what a commit writes into its snapshot is what the proof reads back."""

from __future__ import annotations

from tailfill.lake.batch_summary import BatchSummary
from tailfill.offsets import OffsetRange


def test_a_summary_reads_back_as_it_was_written_with_its_snapshot():
    written = BatchSummary("demo", "backfill-1", 7, [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 9)],
                           lost=[OffsetRange("t", 0, 2, 3)], records_read=11,
                           absent=[OffsetRange("t", 0, 5, 6), OffsetRange("t", 1, 8, 9)], absent_under="read_committed")

    props = {**written.to_properties(), "snapshot-id": "42"}  # as the audit archive keeps it

    assert BatchSummary.recorded_in(props)
    assert BatchSummary.from_properties(props) == BatchSummary(**{**written.__dict__, "snapshot_id": 42})


def test_snapshots_that_record_no_batch_are_told_apart():
    assert not BatchSummary.recorded_in({"added-files": "3", "operation": "replace"})  # compaction


def test_absent_offsets_are_stored_compactly_and_an_older_summary_has_none():
    written = BatchSummary("demo", "tail-1", 0, [OffsetRange("t", 0, 0, 1010)], records_read=1000,
                           absent=[OffsetRange("t", 0, o, o + 1) for o in range(100, 1010, 101)],
                           absent_under="read_committed")
    props = written.to_properties()
    assert props["tailfill.absent"] == '{"t":{"0":"100*10"}}' and props["tailfill.absent-under"] == "read_committed"

    older = {k: v for k, v in props.items() if not k.startswith("tailfill.absent")}
    read = BatchSummary.from_properties(older)
    assert read.absent is None and read.absent_under is None  # recorded nothing: not "nothing absent"
    nothing = BatchSummary("demo", "tail-1", 1, [OffsetRange("t", 0, 1010, 1020)], records_read=10, absent=[])
    assert BatchSummary.from_properties(nothing.to_properties()).absent == []
