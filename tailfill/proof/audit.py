"""Read what the completeness check needs from the tables: commits, stored offsets, a run's rows.

Only the two coordinate columns are read for offset accounting, with Iceberg's file pruning on
the ranges in question, so checking a run costs in proportion to the run, not the table.
"""

from __future__ import annotations

from functools import reduce

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, EqualTo, GreaterThanOrEqual, LessThan, Or
from pyiceberg.table import Table

from tailfill.lake.ledger import (
    SUMMARY_BATCH,
    SUMMARY_LOST,
    SUMMARY_RANGES,
    SUMMARY_RECORDS,
    SUMMARY_RUN,
    batch_summaries,
)
from tailfill.offsets import OffsetRange, TopicPartition, merge, ranges_from_json
from tailfill.proof.completeness import BatchRecord, Offsets
from tailfill.schema import COORDINATES


def committed_batches(table: Table, run_id: str | None = None) -> list[BatchRecord]:
    """The batches committed to ``table`` (all, or one run's), oldest first."""
    table.refresh()
    out = []
    for s in batch_summaries(table):
        if run_id is not None and s.get(SUMMARY_RUN) != run_id:
            continue
        out.append(
            BatchRecord(
                run_id=s.get(SUMMARY_RUN, "?"),
                batch_id=int(s.get(SUMMARY_BATCH, -1)),
                snapshot_id=int(s["snapshot-id"]),
                ranges=ranges_from_json(s.get(SUMMARY_RANGES)),
                lost=ranges_from_json(s.get(SUMMARY_LOST)),
                records_read=int(s.get(SUMMARY_RECORDS, 0)),
            )
        )
    return out


def range_filter(windows: list[OffsetRange] | None) -> BooleanExpression:
    """An Iceberg row filter selecting the offsets in ``windows`` (None: everything)."""
    if windows is None:
        return AlwaysTrue()
    terms = [
        And(EqualTo("kafka_partition", r.partition),
            And(GreaterThanOrEqual("kafka_offset", r.start), LessThan("kafka_offset", r.end)))
        for r in merge(windows)
    ]
    return reduce(Or, terms) if terms else EqualTo("kafka_partition", -1)


def _sorted_offsets(table: Table, row_filter: BooleanExpression) -> dict[TopicPartition, np.ndarray]:
    arrow = table.scan(row_filter=row_filter, selected_fields=COORDINATES).to_arrow()
    out = {}
    if arrow.num_rows == 0:
        return out
    for topic in pc.unique(arrow["kafka_topic"]).to_pylist():
        of_topic = arrow.filter(pc.equal(arrow["kafka_topic"], topic))
        parts = of_topic["kafka_partition"].to_numpy()
        offsets = of_topic["kafka_offset"].to_numpy()
        for p in np.unique(parts):
            out[TopicPartition(topic, int(p))] = np.sort(offsets[parts == p])
    return out


def stored_offsets(data: Table, quarantine: Table, windows: list[OffsetRange] | None) -> dict[TopicPartition, Offsets]:
    """Sorted offsets stored in the data and quarantine tables within ``windows`` (None: all)."""
    row_filter = range_filter(windows)
    data.refresh()
    quarantine.refresh()
    rows, bad = _sorted_offsets(data, row_filter), _sorted_offsets(quarantine, row_filter)
    empty = np.empty(0, np.int64)
    return {tp: Offsets(rows.get(tp, empty), bad.get(tp, empty)) for tp in set(rows) | set(bad)}


def run_rows(data: Table, windows: list[OffsetRange], columns: list[str]) -> pa.Table:
    """The rows of ``data`` within ``windows`` (a run's committed ranges), only ``columns``."""
    data.refresh()
    return data.scan(row_filter=range_filter(windows), selected_fields=tuple(columns)).to_arrow()
