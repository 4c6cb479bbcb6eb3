"""Synthetic micro-batches through the real prepare output and commit path, without Spark or a broker.

For benchmarks and tests of what happens after many commits (commit cost, table upkeep): each
range becomes sample events, parsed with the pipeline's rules, written as Parquet exactly as an
executor writes them (:class:`tailfill.lake.files.FileSet`), and committed with
:func:`tailfill.lake.commit.commit_prepared`, the driver's own commit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

import pyarrow as pa

from tailfill.dev.sample import sample_event
from tailfill.lake.commit import commit_prepared
from tailfill.lake.ledger import CommitResult
from tailfill.lake.prepare import PreparedRange, RangeOutput
from tailfill.lake.rows import RowParser, split_records
from tailfill.offsets import OffsetRange
from tailfill.pipeline.handle import Pipeline
from tailfill.values.schema import HEADERS, RAW_SCHEMA, TIMESTAMP, RangeMarker


def prepare_sample(pipeline: Pipeline, run_id: str, ranges: Sequence[OffsetRange],
                   bad_every: int = 0) -> list[PreparedRange]:
    """Write sample events for ``ranges`` (every ``bad_every``-th malformed) as a task would prepare them (the
    tables made first, as the planner makes them)."""
    cfg, fs = pipeline.cfg, pipeline.fs
    tables = pipeline.provision_tables()
    parser = RowParser(cfg.format)
    out = []
    for r in ranges:
        offsets = range(r.start, r.end)
        values = [b"{not json" if bad_every and o % bad_every == 0 else json.dumps(sample_event(run_id, o)).encode()
                  for o in offsets]
        raw = pa.table([pa.array([r.topic] * r.size), pa.array([r.partition] * r.size, pa.int32()),
                        pa.array(offsets, pa.int64()),
                        pa.array([datetime.now(UTC)] * r.size, TIMESTAMP), pa.nulls(r.size, pa.binary()),
                        pa.array([[]] * r.size, HEADERS), pa.array(values, pa.binary()), pa.nulls(r.size, pa.string())],
                       schema=RAW_SCHEMA)
        output = RangeOutput(fs, cfg, run_id, tables.data.location(), tables.quarantine.location())
        output.add(*split_records(raw, cfg.format, run_id, parser))
        out.append(PreparedRange(RangeMarker(r, r.size), *output.close(), output.rows, output.quarantined))
    return out


def commit_sample_batch(pipeline: Pipeline, run_id: str, batch_id: int, ranges: Sequence[OffsetRange],
                        bad_every: int = 0) -> tuple[CommitResult, float]:
    """Prepare and commit one synthetic micro-batch; returns the commit's result and its seconds."""
    prepared = prepare_sample(pipeline, run_id, ranges, bad_every)
    return commit_prepared(pipeline.cfg, pipeline.provision_tables(), pipeline.fs, pipeline.state, run_id, batch_id,
                           prepared)
