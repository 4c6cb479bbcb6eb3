"""One micro-batch's audit: written into its commit's snapshot summary, read back by the proof.

The same type on both sides of the commit protocol: :func:`tailfill.lake.ledger.commit_batch`
writes :meth:`BatchSummary.to_properties` as the snapshot's summary, and the proof reads it back
with :meth:`BatchSummary.from_properties` (from live snapshots and from the audit archive that
maintenance keeps when snapshots expire). The property names are the table's stored format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tailfill.offsets import OffsetRange, ranges_from_json, ranges_to_json, runs_from_json, runs_to_json

SUMMARY_PIPELINE = "tailfill.pipeline"
SUMMARY_RUN = "tailfill.run-id"
SUMMARY_BATCH = "tailfill.batch-id"
SUMMARY_RANGES = "tailfill.ranges"
SUMMARY_LOST = "tailfill.lost"
SUMMARY_RECORDS = "tailfill.records-read"
SUMMARY_ABSENT = "tailfill.absent"  # offsets the broker did not deliver, as run-length text (tailfill.offsets)
SUMMARY_ABSENT_UNDER = "tailfill.absent-under"  # the isolation level they were not delivered under


@dataclass(frozen=True)
class BatchSummary:
    """The ``[start, end)`` ranges one batch of one run committed, what of them was lost, what it read, and which
    offsets of them the broker did not deliver (``absent``) under which isolation level (``absent_under``: the
    reason it records). ``absent`` is None for a batch committed before absent offsets were recorded."""

    pipeline: str
    run_id: str
    batch_id: int
    ranges: list[OffsetRange]
    lost: list[OffsetRange] = field(default_factory=list)
    records_read: int = 0
    absent: list[OffsetRange] | None = None
    absent_under: str | None = None
    snapshot_id: int | None = None  # the snapshot that carries it (None until committed)

    def to_properties(self) -> dict[str, str]:
        """The snapshot summary properties that record this batch."""
        return {
            SUMMARY_PIPELINE: self.pipeline,
            SUMMARY_RUN: self.run_id,
            SUMMARY_BATCH: str(self.batch_id),
            SUMMARY_RANGES: ranges_to_json(self.ranges),
            SUMMARY_LOST: ranges_to_json(self.lost),
            SUMMARY_RECORDS: str(self.records_read),
            **({SUMMARY_ABSENT: runs_to_json(self.absent)} if self.absent is not None else {}),
            **({SUMMARY_ABSENT_UNDER: self.absent_under} if self.absent_under is not None else {}),
        }

    @classmethod
    def from_properties(cls, props: Mapping[str, str], snapshot_id: int | None = None) -> BatchSummary:
        """A summary as a snapshot (or the audit archive, ``snapshot-id`` included) recorded it."""
        if snapshot_id is None and "snapshot-id" in props:
            snapshot_id = int(props["snapshot-id"])
        return cls(
            pipeline=props.get(SUMMARY_PIPELINE, "?"),
            run_id=props.get(SUMMARY_RUN, "?"),
            batch_id=int(props.get(SUMMARY_BATCH, -1)),
            ranges=ranges_from_json(props.get(SUMMARY_RANGES)),
            lost=ranges_from_json(props.get(SUMMARY_LOST)),
            records_read=int(props.get(SUMMARY_RECORDS, 0)),
            absent=runs_from_json(props[SUMMARY_ABSENT]) if SUMMARY_ABSENT in props else None,
            absent_under=props.get(SUMMARY_ABSENT_UNDER),
            snapshot_id=snapshot_id,
        )

    @staticmethod
    def recorded_in(props: Mapping[str, str]) -> bool:
        """Whether snapshot summary ``props`` record a Tailfill batch."""
        return SUMMARY_RANGES in props
