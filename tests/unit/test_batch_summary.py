"""The one batch-summary type: what a commit writes into its snapshot is what the proof reads back."""

from __future__ import annotations

from tailfill.lake.batch_summary import BatchSummary
from tailfill.offsets import OffsetRange


def test_a_summary_reads_back_as_it_was_written_with_its_snapshot():
    written = BatchSummary("demo", "backfill-1", 7, [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 9)],
                           lost=[OffsetRange("t", 0, 2, 3)], records_read=13)

    props = {**written.to_properties(), "snapshot-id": "42"}  # as the audit archive keeps it

    assert BatchSummary.recorded_in(props)
    assert BatchSummary.from_properties(props) == BatchSummary(**{**written.__dict__, "snapshot_id": 42})


def test_snapshots_that_record_no_batch_are_told_apart():
    assert not BatchSummary.recorded_in({"added-files": "3", "operation": "replace"})  # compaction
