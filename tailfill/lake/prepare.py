"""Prepare, the first phase of a commit: one offset range read, parsed and written as Parquet files.

Runs where the range's task runs (a Spark executor): it reads the range from Kafka, splits the
records into rows and quarantine rows, writes both to new files under the tables' locations, and
refuses to hand on a range whose rows + quarantined differ from what the source read. Nothing is
committed here: a :class:`PreparedRange` says which files to commit, and the driver commits them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import pyarrow as pa

from tailfill import failpoints
from tailfill.config import REGISTRY_FORMATS, PipelineConfig
from tailfill.errors import DroppedRecordsError
from tailfill.formats.decode import RegistryDecoder
from tailfill.lake.files import FileSet
from tailfill.lake.partition import footer, split
from tailfill.lake.rows import RowParser, split_records
from tailfill.offsets import OffsetRange
from tailfill.plumbing.warehouse import filesystem
from tailfill.source.kafka import consumer_config, read_ranges, shared_consumer
from tailfill.values.freshness import TimestampSketch
from tailfill.values.partition_terms import parse_terms
from tailfill.values.schema import QUARANTINE_SCHEMA, RangeMarker, table_schema

ROW_GROUP_ROWS = 131_072  # rows buffered before a Parquet row group is written


@dataclass(frozen=True)
class PreparedRange:
    """What one task prepared for one range: files to commit, and what it read, kept and took."""

    marker: RangeMarker
    data_files: list[str]
    quarantine_files: list[str]
    rows: int
    quarantined: int
    stages: dict[str, float] = field(default_factory=dict)  # seconds in read, parse, write
    timestamps: TimestampSketch | None = None  # the task's record timestamps (carried by its first range)


PREPARED_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("start", pa.int64()), ("end", pa.int64()),
    ("records", pa.int64()), ("lost", pa.string()), ("data_files", pa.list_(pa.string())),
    ("quarantine_files", pa.list_(pa.string())), ("rows", pa.int64()), ("quarantined", pa.int64()),
    ("stages", pa.string()), ("timestamps", pa.list_(pa.int64())),
])


def to_arrow(prepared: list[PreparedRange]) -> pa.RecordBatch:
    """Prepared ranges as rows of :data:`PREPARED_SCHEMA` (how they travel back to the driver)."""
    rows = [{"topic": p.marker.range.topic, "partition": p.marker.range.partition, "start": p.marker.range.start,
             "end": p.marker.range.end, "records": p.marker.records,
             "lost": json.dumps([[r.start, r.end] for r in p.marker.lost]), "data_files": p.data_files,
             "quarantine_files": p.quarantine_files, "rows": p.rows, "quarantined": p.quarantined,
             "stages": json.dumps(p.stages),
             "timestamps": p.timestamps.to_json() if p.timestamps else None} for p in prepared]
    return pa.RecordBatch.from_pylist(rows, schema=PREPARED_SCHEMA)


def from_arrow(table: pa.Table) -> list[PreparedRange]:
    out = []
    for r in table.to_pylist():
        rng = OffsetRange(r["topic"], r["partition"], r["start"], r["end"])
        lost = tuple(rng.with_bounds(s, e) for s, e in json.loads(r["lost"]))
        out.append(PreparedRange(RangeMarker(rng, r["records"], lost), r["data_files"], r["quarantine_files"],
                                 r["rows"], r["quarantined"], json.loads(r["stages"]),
                                 TimestampSketch.from_json(r["timestamps"])))
    return out


_PARSERS: dict[str, RowParser | RegistryDecoder] = {}


def _parser(cfg: PipelineConfig) -> RowParser | RegistryDecoder:
    key = cfg.format.model_dump_json()
    if key not in _PARSERS:
        _PARSERS[key] = RegistryDecoder(cfg.format) if cfg.format.type in REGISTRY_FORMATS else RowParser(cfg.format)
    return _PARSERS[key]


def warm_up(cfg: PipelineConfig) -> None:
    """Make this process ready to prepare ranges of ``cfg``: parser built, consumer connected."""
    _parser(cfg)
    shared_consumer(consumer_config(cfg.source)).list_topics(cfg.source.topic, timeout=10)


def prepare_ranges(cfg: PipelineConfig, run_id: str, ranges: list[OffsetRange], data_location: str,
                   quarantine_location: str, table_columns: pa.Schema | None = None) -> list[PreparedRange]:
    """Read ``ranges`` together, write each one's rows and quarantined rows to its own new files,
    and check that nothing was dropped. One :class:`PreparedRange` per range, in order; the task's
    time by stage is carried by the first (the ranges were read, parsed and written together).
    ``table_columns``: the data table's columns as the driver last saw them (registry formats)."""
    stages = {"read": 0.0, "parse": 0.0, "write": 0.0}
    fs = filesystem(cfg.target)
    conf = consumer_config(cfg.source)
    parser = _parser(cfg)
    out: dict[int, RangeOutput] = {r.partition: RangeOutput(fs, cfg, run_id, data_location, quarantine_location)
                               for r in ranges}
    markers: dict[int, RangeMarker] = {}
    stamps: list[pa.Array] = []
    reading = read_ranges(conf, ranges, on_expired=cfg.source.on_expired_offsets, consumer=shared_consumer(conf))
    while True:
        t = time.perf_counter()
        batch = next(reading, None)
        stages["read"] += time.perf_counter() - t
        if batch is None:
            break
        partition = batch.column("kafka_partition")[0].as_py()
        if batch.column("range_marker").null_count == 0:
            marker = RangeMarker.from_row(batch.column("kafka_topic")[0].as_py(), partition,
                                          batch.column("range_marker")[0].as_py())
            markers[partition] = marker
            continue
        stamps.append(batch.column("kafka_timestamp"))
        t = time.perf_counter()
        if isinstance(parser, RegistryDecoder):
            ok, quarantine = parser.split(pa.Table.from_batches([batch]), run_id, table_columns)
        else:
            ok, quarantine = split_records(batch, cfg.format, run_id, parser)
        stages["parse"] += time.perf_counter() - t
        t = time.perf_counter()
        out[partition].add(ok, quarantine)
        failpoints.pause("while-writing")
        stages["write"] += time.perf_counter() - t
    t = time.perf_counter()
    files = {p: o.close() for p, o in out.items()}
    stages["write"] += time.perf_counter() - t
    sketch = TimestampSketch.of(stamps)
    prepared = []
    for i, r in enumerate(ranges):
        marker, o = markers[r.partition], out[r.partition]
        if o.rows + o.quarantined != marker.records:
            raise DroppedRecordsError(f"{r}: the source read {marker.records} records but {o.rows + o.quarantined} "
                                      "rows were written (rows + quarantined); refusing to commit")
        prepared.append(PreparedRange(marker, *files[r.partition], o.rows, o.quarantined,
                                      {k: round(v, 4) for k, v in stages.items()} if i == 0 else {},
                                      sketch if i == 0 else None))
    return prepared


class RangeOutput:
    """One range's rows and quarantined rows on their way to Parquet, in row groups of a good size."""

    def __init__(self, fs, cfg: PipelineConfig, run_id: str, data_location: str, quarantine_location: str):
        self.fs, self.run_id, self.data_location = fs, run_id, data_location
        follows = cfg.format.type in REGISTRY_FORMATS  # rows carry their writer schema's columns
        self.schema = None if follows else table_schema(cfg.format.fields, cfg.format.key)
        self.terms = parse_terms(cfg.target.partition_by)
        self.data: dict[tuple, FileSet] = {}  # one file set per partition value: no file mixes partitions
        self.bad = FileSet(fs, quarantine_location, QUARANTINE_SCHEMA, run_id)
        self.pending: tuple[list[pa.Table], list[pa.Table]] = ([], [])
        self.rows = self.quarantined = 0

    def add(self, ok: pa.Table, quarantine: pa.Table) -> None:
        self.rows += ok.num_rows
        self.quarantined += quarantine.num_rows
        self.pending[0].append(ok)
        self.pending[1].append(quarantine)
        self._flush(force=False)

    def _flush(self, force: bool) -> None:
        rows, quarantined = (self._take(pending, force) for pending in self.pending)
        if quarantined is not None:
            self.bad.write(quarantined)
        for values, part in split(rows, self.terms) if rows is not None else ():
            if values not in self.data:
                self.data[values] = FileSet(self.fs, self.data_location, self.schema, self.run_id,
                                            footer(self.terms, values))
            self.data[values].write(part)

    @staticmethod
    def _take(pending: list[pa.Table], force: bool) -> pa.Table | None:
        """The pending tables as one, emptying ``pending``, once there is a row group's worth (or ``force``)."""
        if not pending or not (force or sum(t.num_rows for t in pending) >= ROW_GROUP_ROWS):
            return None
        rows = pa.concat_tables(pending, promote_options="permissive")
        pending.clear()
        return rows

    def close(self) -> tuple[list[str], list[str]]:
        self._flush(force=True)
        return [uri for fileset in self.data.values() for uri in fileset.close()], self.bad.close()
