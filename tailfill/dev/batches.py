"""Synthetic micro-batches through the real prepare output and commit path, without Spark or a broker.

For benchmarks and tests of what happens after many commits (commit cost, table upkeep): each
range becomes sample events, decoded with the pipeline's format, written as Parquet exactly as an
executor writes them (:func:`tailfill.lake.prepare.prepare_ranges`), and committed with the driver's
own commit (:class:`tailfill.lake.commit.Committer`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime

import pyarrow as pa

from tailfill.dev.sample import sample_event
from tailfill.lake.ledger import CommitResult
from tailfill.lake.prepare import Destination, PreparedRange, prepare_ranges
from tailfill.lake.schema_change import table_columns
from tailfill.offsets import OffsetRange
from tailfill.pipeline.handle import Pipeline
from tailfill.values.schema import HEADERS, RAW_SCHEMA, TIMESTAMP, RangeMarker

Event = Callable[[str, int], dict]  # the sample event at an offset (its run's tag, the offset)


def sample_records(run_id: str, ranges: Sequence[OffsetRange], bad_every: int = 0,
                   event: Event = sample_event) -> Iterator[pa.RecordBatch]:
    """Sample events (``event(run_id, offset)``) at the offsets of ``ranges`` (every ``bad_every``-th malformed), as a
    reader yields them: each range's records, then a marker per range."""
    for r in ranges:
        offsets = range(r.start, r.end)
        values = [b"{not json" if bad_every and o % bad_every == 0 else json.dumps(event(run_id, o)).encode()
                  for o in offsets]
        yield pa.RecordBatch.from_arrays(
            [pa.array([r.topic] * r.size), pa.array([r.partition] * r.size, pa.int32()), pa.array(offsets, pa.int64()),
             pa.array([datetime.now(UTC)] * r.size, TIMESTAMP), pa.nulls(r.size, pa.binary()),
             pa.array([[]] * r.size, HEADERS), pa.array(values, pa.binary()), pa.nulls(r.size, pa.string()),
             pa.nulls(r.size, pa.string())],
            schema=RAW_SCHEMA)
    for r in ranges:
        yield RangeMarker(r, r.size).to_batch()


def prepare_sample(pipeline: Pipeline, run_id: str, ranges: Sequence[OffsetRange],
                   bad_every: int = 0, event: Event = sample_event) -> list[PreparedRange]:
    """Write sample events for ``ranges`` (one range per partition) as an executor prepares them (the tables made
    first, as the planner makes them)."""
    tables = pipeline.provision_tables()
    where = Destination(pipeline.fs, tables.data.location(), tables.quarantine.location(),
                        pipeline.cfg.target.partition_by)
    return prepare_ranges(lambda todo: sample_records(run_id, todo, bad_every, event), pipeline.format.decoder(), where,
                          run_id, ranges, table_columns(tables.data))


def commit_sample_batch(pipeline: Pipeline, run_id: str, batch_id: int, ranges: Sequence[OffsetRange],
                        bad_every: int = 0, event: Event = sample_event) -> tuple[CommitResult, float]:
    """Prepare and commit one synthetic micro-batch; returns the commit's result and its seconds."""
    prepared = prepare_sample(pipeline, run_id, ranges, bad_every, event)
    return pipeline.committer(pipeline.provision_tables()).commit(run_id, batch_id, prepared)
