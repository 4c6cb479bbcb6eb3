"""Prepare, the first phase of a commit: offset ranges read, decoded and written as Parquet files.

Runs where the ranges' task runs (a Spark executor): it reads the ranges (a :data:`Reader`: from
Kafka), splits the records into rows and quarantine rows with the pipeline's decoder
(:func:`tailfill.formats.base.split_records`), writes both to new files under the tables' locations,
and refuses to hand on a range whose rows + quarantined differ from what the source read, or of which the source
left an offset unaccounted for (neither read, nor recorded as absent or lost). Nothing is
committed here: a :class:`PreparedRange` says which files to commit, and the driver commits them.
What travels back to the driver is data (:func:`to_arrow`), a failure included (:func:`failed`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.fs as pafs

from tailfill import failpoints
from tailfill.errors import DroppedRecordsError, ErrorInfo, RemoteError
from tailfill.formats.base import Decoder, split_records
from tailfill.lake.files import FileSet
from tailfill.lake.partition import footer, split
from tailfill.offsets import OffsetRange, TopicPartition, runs_from_text, runs_to_text, total
from tailfill.values.drift import Drift
from tailfill.values.freshness import TimestampSketch
from tailfill.values.partition_terms import parse_terms
from tailfill.values.schema import QUARANTINE_SCHEMA, RangeMarker

# The records of ranges (one range per topic-partition) as batches of RAW_SCHEMA, then one marker per range.
Reader = Callable[[list[OffsetRange]], Iterator[pa.RecordBatch]]

ROW_GROUP_ROWS = 131_072  # rows buffered before a Parquet row group is written


@dataclass(frozen=True)
class PreparedRange:
    """What one task prepared for one range: files to commit, and what it read, kept and took."""

    marker: RangeMarker
    data_files: list[str]  # each file once per batch: one that holds several ranges' rows, with the first of them
    quarantine_files: list[str]
    rows: int
    quarantined: int
    stages: dict[str, float] = field(default_factory=dict)  # seconds in read, parse, write (a task's first range only)
    timestamps: TimestampSketch | None = None  # the task's record timestamps (carried by its first range)
    drift: Drift | None = None  # the task's fields not declared (JSON; carried by its first range)

    @property
    def files(self) -> list[str]:
        """Every file the task wrote for the range: data, then quarantine."""
        return [*self.data_files, *self.quarantine_files]


PREPARED_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("start", pa.int64()), ("end", pa.int64()),
    ("records", pa.int64()), ("lost", pa.string()), ("absent", pa.string()), ("isolation", pa.string()),
    ("data_files", pa.list_(pa.string())), ("quarantine_files", pa.list_(pa.string())), ("rows", pa.int64()),
    ("quarantined", pa.int64()),
    ("stages", pa.string()), ("timestamps", pa.list_(pa.int64())), ("drift", pa.string()),
    ("error", pa.string()),  # a task that failed: its error as data (ErrorInfo JSON); every other column null
])


def to_arrow(prepared: list[PreparedRange]) -> pa.RecordBatch:
    """Prepared ranges as rows of :data:`PREPARED_SCHEMA` (how they travel back to the driver)."""
    rows = [{"topic": p.marker.range.topic, "partition": p.marker.range.partition, "start": p.marker.range.start,
             "end": p.marker.range.end, "records": p.marker.records,
             "lost": json.dumps([[r.start, r.end] for r in p.marker.lost]),
             "absent": runs_to_text((r.start, r.end) for r in p.marker.absent), "isolation": p.marker.isolation,
             "data_files": p.data_files, "quarantine_files": p.quarantine_files, "rows": p.rows,
             "quarantined": p.quarantined,
             "stages": json.dumps(p.stages),
             "timestamps": p.timestamps.to_json() if p.timestamps else None,
             "drift": p.drift.to_json() if p.drift else None, "error": None} for p in prepared]
    return pa.RecordBatch.from_pylist(rows, schema=PREPARED_SCHEMA)


def failed(error: ErrorInfo) -> pa.RecordBatch:
    """A task's failure as the one row it hands back (the driver raises it again: :func:`from_arrow`)."""
    return pa.RecordBatch.from_pylist([{"error": json.dumps(error.to_dict())}], schema=PREPARED_SCHEMA)


def from_arrow(table: pa.Table) -> list[PreparedRange]:
    """The prepared ranges the tasks handed back; a task's failure is raised here, as the error it was."""
    rows = table.to_pylist()
    for r in rows:
        if r["error"] is not None:
            raise RemoteError(ErrorInfo.from_dict(json.loads(r["error"])))
    out = []
    for r in rows:
        rng = OffsetRange(r["topic"], r["partition"], r["start"], r["end"])
        lost = tuple(rng.with_bounds(s, e) for s, e in json.loads(r["lost"]))
        absent = tuple(rng.with_bounds(s, e) for s, e in runs_from_text(r["absent"]))
        out.append(PreparedRange(RangeMarker(rng, r["records"], lost, absent, r["isolation"]), r["data_files"],
                                 r["quarantine_files"], r["rows"], r["quarantined"], json.loads(r["stages"]),
                                 TimestampSketch.from_json(r["timestamps"]),
                                 Drift.from_json(r["drift"]) if r["drift"] else None))
    return out


@dataclass(frozen=True)
class Destination:
    """Where a run's prepared files go: the tables' locations on the warehouse's filesystem, data files split by the
    table's partition spec (``partition_by``)."""

    fs: pafs.FileSystem
    data_location: str
    quarantine_location: str
    partition_by: tuple[str, ...] = ()


def prepare_ranges(read: Reader, decoder: Decoder, where: Destination, run_id: str, ranges: Sequence[OffsetRange],
                   table_columns: pa.Schema | None = None) -> list[PreparedRange]:
    """Read ``ranges`` together, write each one's rows and quarantined rows to its own new files,
    and check that nothing was dropped. One :class:`PreparedRange` per range, in order; the task's
    time by stage is carried by the first (the ranges were read, parsed and written together).
    ``table_columns``: the data table's columns as the driver last saw them (a decoder may check records
    against them)."""
    stages = {"read": 0.0, "parse": 0.0, "write": 0.0}
    shared = PartitionFiles(where, decoder.rows_schema, run_id) if where.partition_by else None
    out: dict[TopicPartition, RangeOutput] = {r.tp: RangeOutput(where, decoder.rows_schema, run_id, shared)
                                              for r in ranges}
    markers: dict[TopicPartition, RangeMarker] = {}
    stamps: list[pa.Array] = []
    drift = Drift()
    reading = read(list(ranges))
    while True:
        t = time.perf_counter()
        batch = next(reading, None)
        stages["read"] += time.perf_counter() - t
        if batch is None:
            break
        tp = TopicPartition(batch.column("kafka_topic")[0].as_py(), batch.column("kafka_partition")[0].as_py())
        if batch.column("range_marker").null_count == 0:
            markers[tp] = RangeMarker.from_row(tp.topic, tp.partition, batch.column("range_marker")[0].as_py())
            continue
        stamps.append(batch.column("kafka_timestamp"))
        t = time.perf_counter()
        ok, quarantine = split_records(batch, decoder, run_id, table_columns, drift)
        stages["parse"] += time.perf_counter() - t
        t = time.perf_counter()
        out[tp].add(tp, ok, quarantine)
        failpoints.pause("while-writing")
        stages["write"] += time.perf_counter() - t
    t = time.perf_counter()
    files = {r.tp: out[r.tp].close() for r in ranges}
    if shared is not None:  # each partition's file listed once, with the first range that wrote to it
        for tp, values in shared.close().items():
            files[tp][0].extend(values)
    stages["write"] += time.perf_counter() - t
    sketch = TimestampSketch.of(stamps)
    prepared = []
    for i, r in enumerate(ranges):
        marker, o = markers[r.tp], out[r.tp]
        if marker.unaccounted:
            raise DroppedRecordsError(f"{r}: the source accounted for {r.size - marker.unaccounted} of its {r.size} "
                                      f"offsets ({marker.records} read, {total(marker.absent)} absent, "
                                      f"{total(marker.lost)} lost); refusing to commit")
        if o.rows + o.quarantined != marker.records:
            raise DroppedRecordsError(f"{r}: the source read {marker.records} records but {o.rows + o.quarantined} "
                                      "rows were written (rows + quarantined); refusing to commit")
        prepared.append(PreparedRange(marker, *files[r.tp], o.rows, o.quarantined,
                                      {k: round(v, 4) for k, v in stages.items()} if i == 0 else {},
                                      sketch if i == 0 else None, drift if i == 0 and drift else None))
    return prepared


class PartitionFiles:
    """A task's data files of a partitioned table: one file set per partition value, shared by the task's ranges,
    so that a task writes at most one file per table partition (until its schema changes)."""

    def __init__(self, where: Destination, schema: pa.Schema | None, run_id: str):
        self.where, self.schema, self.run_id = where, schema, run_id
        self.terms = parse_terms(where.partition_by)
        self.sets: dict[tuple, FileSet] = {}
        self.first: dict[tuple, TopicPartition] = {}  # the range that wrote to a partition first

    def write(self, tp: TopicPartition, rows: pa.Table) -> None:
        for values, part in split(rows, self.terms):
            if values not in self.sets:
                self.sets[values] = FileSet(self.where.fs, self.where.data_location, self.schema, self.run_id,
                                            footer(self.terms, values))
                self.first[values] = tp
            self.sets[values].write(part)

    def close(self) -> dict[TopicPartition, list[str]]:
        """The files written, by the range each is listed with."""
        out: dict[TopicPartition, list[str]] = {}
        for values, fileset in self.sets.items():
            out.setdefault(self.first[values], []).extend(fileset.close())
        return out


class RangeOutput:
    """One range's rows and quarantined rows on their way to Parquet, in row groups of a good size."""

    def __init__(self, where: Destination, schema: pa.Schema | None, run_id: str,
                 shared: PartitionFiles | None = None):
        """``schema``: every row's columns; None: rows carry their writer schema's (files follow them).
        ``shared``: the task's files of a partitioned table (None: this range's own file)."""
        self.tp: TopicPartition | None = None
        self.shared = shared
        self.data = None if shared else FileSet(where.fs, where.data_location, schema, run_id)
        self.bad = FileSet(where.fs, where.quarantine_location, QUARANTINE_SCHEMA, run_id)
        self.pending: tuple[list[pa.Table], list[pa.Table]] = ([], [])
        self.rows = self.quarantined = 0

    def add(self, tp: TopicPartition, ok: pa.Table, quarantine: pa.Table) -> None:
        self.tp = tp
        self.rows += ok.num_rows
        self.quarantined += quarantine.num_rows
        self.pending[0].append(ok)
        self.pending[1].append(quarantine)
        self._flush(force=False)

    def _flush(self, force: bool) -> None:
        rows, quarantined = (self._take(pending, force) for pending in self.pending)
        if quarantined is not None:
            self.bad.write(quarantined)
        if rows is None:
            return
        if self.shared is not None:
            self.shared.write(self.tp, rows)
        else:
            self.data.write(rows)

    @staticmethod
    def _take(pending: list[pa.Table], force: bool) -> pa.Table | None:
        """The pending tables as one, emptying ``pending``, once there is a row group's worth (or ``force``)."""
        if not pending or not (force or sum(t.num_rows for t in pending) >= ROW_GROUP_ROWS):
            return None
        rows = pa.concat_tables(pending, promote_options="permissive")
        pending.clear()
        return rows

    def close(self) -> tuple[list[str], list[str]]:
        """This range's own files (data, quarantine); a partitioned table's data files are the task's to close."""
        self._flush(force=True)
        return (self.data.close() if self.data is not None else []), self.bad.close()
