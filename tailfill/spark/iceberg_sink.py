"""``tailfill_iceberg``: a streaming sink that commits each micro-batch to Iceberg in two phases.

Prepare (executors): each task parses its records, writes the good rows and the quarantined rows
to new Parquet files with pyarrow (local or S3), and checks that rows + quarantined equals what the
source read for each range. Commit (driver): one idempotent Iceberg commit per table per batch,
quarantine first, then data with the offset ledger (see :mod:`tailfill.ledger`).

Files of a failed or killed attempt are left alone: nothing references them, and cleanup never
touches files a committed snapshot might reference.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from tailfill import faults
from tailfill.config import PipelineConfig
from tailfill.lake import ensure_tables, filesystem, fs_path
from tailfill.ledger import BatchCommit, commit_batch
from tailfill.offsets import OffsetRange
from tailfill.records import QUARANTINE_SCHEMA, split_records, table_schema


class DroppedRecordsError(RuntimeError):
    """A writer produced fewer rows than the source read: refusing to commit."""


@dataclass
class WrittenFiles(WriterCommitMessage):
    data_files: list[str] = field(default_factory=list)
    quarantine_files: list[str] = field(default_factory=list)
    rows: int = 0
    quarantined: int = 0
    markers: list[dict] = field(default_factory=list)
    started_at: float = 0.0  # when this task began reading and writing (wall clock)


class _FileSet:
    """Parquet files under one table location, opened lazily, one per task."""

    def __init__(self, fs, location: str, schema: pa.Schema, run_id: str):
        self.fs, self.location, self.schema, self.run_id = fs, location.rstrip("/"), schema, run_id
        self.writer: pq.ParquetWriter | None = None
        self.uris: list[str] = []

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if self.writer is None:
            uri = f"{self.location}/data/{self.run_id}-{uuid.uuid4().hex}.parquet"
            self.fs.create_dir(fs_path(f"{self.location}/data"), recursive=True)
            self.writer = pq.ParquetWriter(fs_path(uri), self.schema, filesystem=self.fs, compression="zstd")
            self.uris.append(uri)
        self.writer.write_table(table)

    def close(self) -> list[str]:
        if self.writer is not None:
            self.writer.close()
        return self.uris


def in_range(table: pa.Table, r: OffsetRange) -> pa.ChunkedArray:
    """Boolean mask of the rows of ``table`` whose Kafka coordinates lie in ``r``."""
    return pc.and_(
        pc.and_(pc.equal(table["kafka_partition"], r.partition), pc.equal(table["kafka_topic"], r.topic)),
        pc.and_(pc.greater_equal(table["kafka_offset"], r.start), pc.less(table["kafka_offset"], r.end)),
    )


def _count_by_range(table: pa.Table, ranges: list[OffsetRange]) -> dict[OffsetRange, int]:
    return {r: pc.sum(in_range(table, r)).as_py() or 0 for r in ranges}


def marker_range(marker: dict) -> OffsetRange:
    return OffsetRange(marker["topic"], marker["partition"], marker["start"], marker["end"])


class IcebergStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict[str, str]):
        options = {k.lower(): v for k, v in options.items()}  # Spark lower-cases option keys
        self.cfg = PipelineConfig.from_json(options["pipeline"])
        self.run_id = options["runid"]
        self.data_location = options["datalocation"]
        self.quarantine_location = options["quarantinelocation"]
        self.report_path = options.get("reportpath")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
        fs = filesystem(self.cfg.target)
        data = _FileSet(fs, self.data_location, table_schema(self.cfg.format), self.run_id)
        bad = _FileSet(fs, self.quarantine_location, QUARANTINE_SCHEMA, self.run_id)
        msg = WrittenFiles(started_at=time.time())
        seen_ok, seen_bad = [], []
        for batch in iterator:
            is_marker = pc.is_valid(batch.column("range_marker"))
            for row in batch.filter(is_marker).select(["kafka_topic", "kafka_partition", "range_marker"]).to_pylist():
                msg.markers.append({"topic": row["kafka_topic"], "partition": row["kafka_partition"],
                                    **json.loads(row["range_marker"])})
            records = batch.filter(pc.invert(is_marker))
            if records.num_rows == 0:
                continue
            ok, quarantined = split_records(records, self.cfg.format, self.run_id)
            data.write(ok)
            bad.write(quarantined)
            faults.pause("while-writing")
            msg.rows += ok.num_rows
            msg.quarantined += quarantined.num_rows
            seen_ok.append(ok.select(["kafka_topic", "kafka_partition", "kafka_offset"]))
            seen_bad.append(quarantined.select(["kafka_topic", "kafka_partition", "kafka_offset"]))
        msg.data_files, msg.quarantine_files = data.close(), bad.close()
        self._check_nothing_dropped(msg, seen_ok + seen_bad)
        return msg

    @staticmethod
    def _check_nothing_dropped(msg: WrittenFiles, seen: list[pa.Table]) -> None:
        ranges = [marker_range(m) for m in msg.markers]
        if not ranges:
            return
        written = _count_by_range(pa.concat_tables(seen), ranges) if seen else dict.fromkeys(ranges, 0)
        for m, r in zip(msg.markers, ranges, strict=True):
            if written[r] != m["records"]:
                raise DroppedRecordsError(
                    f"{r}: the source read {m['records']} records but {written[r]} rows were written "
                    "(rows + quarantined); refusing to commit"
                )

    def commit(self, messages: Sequence[WrittenFiles | None], batchId: int) -> None:
        msgs = [m for m in messages if m is not None]
        markers = [mk for m in msgs for mk in m.markers]
        if not markers:
            return  # an empty batch commits nothing and never fails
        ranges = [marker_range(mk) for mk in markers]
        lost = [r.with_bounds(s, e) for mk, r in zip(markers, ranges, strict=True) for s, e in mk["lost"]]
        records = sum(mk["records"] for mk in markers)
        rows, quarantined = sum(m.rows for m in msgs), sum(m.quarantined for m in msgs)
        faults.pause("before-commit")
        faults.maybe_fail("before-commit")
        started = time.perf_counter()
        data_table, quarantine_table = ensure_tables(self.cfg)
        fs = filesystem(self.cfg.target)

        def base(files: Sequence[str], rows_: int) -> BatchCommit:
            return BatchCommit(self.cfg.name, self.run_id, batchId, ranges, files, lost, records, rows_)

        q_files = [f for m in msgs for f in m.quarantine_files]
        if q_files:
            commit_batch(quarantine_table, base(q_files, quarantined),
                         lambda fs_, keep: rewrite_files(fs, fs_, keep, self.quarantine_location))
        result = commit_batch(data_table, base([f for m in msgs for f in m.data_files], rows),
                              lambda fs_, keep: rewrite_files(fs, fs_, keep, self.data_location))
        batch_s = time.time() - min(m.started_at for m in msgs)
        self._report(batchId, ranges, records, rows, quarantined, result, time.perf_counter() - started, batch_s)

    def _report(self, batch_id, ranges, records, rows, quarantined, result, commit_s, batch_s) -> None:
        if not self.report_path:
            return
        line = {
            "batch_id": batch_id, "at": time.time(), "seconds": round(batch_s, 3),
            "offsets": sum(r.size for r in ranges),
            "records": records, "rows": rows, "quarantined": quarantined,
            "committed": [str(r) for r in result.committed], "skipped": [str(r) for r in result.skipped],
            "snapshot_id": result.snapshot_id, "commit_ms": round(commit_s * 1000, 1),
        }
        path = Path(self.report_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(line) + "\n")


def rewrite_files(fs, files: Sequence[str], keep: list[OffsetRange], location: str) -> list[str]:
    """New files holding only the rows of ``files`` whose offsets lie in ``keep``."""
    out = []
    for uri in files:
        table = pq.read_table(fs_path(uri), filesystem=fs)
        mask = pa.array([False] * table.num_rows)
        for r in keep:
            mask = pc.or_(mask, in_range(table, r))
        kept = table.filter(mask)
        if kept.num_rows:
            new_uri = f"{location.rstrip('/')}/data/rewrite-{uuid.uuid4().hex}.parquet"
            fs.create_dir(fs_path(f"{location.rstrip('/')}/data"), recursive=True)
            pq.write_table(kept, fs_path(new_uri), filesystem=fs, compression="zstd")
            out.append(new_uri)
    return out


class IcebergSinkDataSource(DataSource):
    """Write-only data source: ``df.writeStream.format("tailfill_iceberg")``."""

    @classmethod
    def name(cls) -> str:
        return "tailfill_iceberg"

    def schema(self) -> str:
        from tailfill.spark.kafka_source import SOURCE_SCHEMA

        return SOURCE_SCHEMA

    def streamWriter(self, schema: StructType, overwrite: bool) -> IcebergStreamWriter:
        return IcebergStreamWriter(dict(self.options))
