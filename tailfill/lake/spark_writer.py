"""``tailfill_iceberg``: a streaming sink that commits each micro-batch to Iceberg in two phases.

Prepare (executors): each task parses its records, writes the good rows and the quarantined rows
to new Parquet files (:mod:`tailfill.lake.files`), and checks that rows + quarantined equals what
the source read for each range (its :class:`~tailfill.schema.RangeMarker`). Commit (driver): one
idempotent Iceberg commit per table per batch, quarantine first, then data with the offset ledger
(:mod:`tailfill.lake.ledger`), then one :class:`~tailfill.lake.batch_report.BatchReport` line.

Files of a failed or killed attempt are left alone: nothing references them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from tailfill.config import PipelineConfig
from tailfill.dev import faults
from tailfill.errors import DroppedRecordsError
from tailfill.lake.batch_report import BatchReport, append_report
from tailfill.lake.files import FileSet, in_range, rewrite_files
from tailfill.lake.ledger import BatchCommit, commit_batch
from tailfill.lake.rows import split_records
from tailfill.lake.tables import ensure_tables, filesystem
from tailfill.offsets import OffsetRange
from tailfill.schema import COORDINATES, QUARANTINE_SCHEMA, RAW_SCHEMA, RangeMarker, spark_ddl, table_schema


@dataclass
class WrittenFiles(WriterCommitMessage):
    data_files: list[str] = field(default_factory=list)
    quarantine_files: list[str] = field(default_factory=list)
    rows: int = 0
    quarantined: int = 0
    markers: list[RangeMarker] = field(default_factory=list)
    started_at: float = 0.0  # when this task began reading and writing (wall clock)


def _count_by_range(table: pa.Table, ranges: list[OffsetRange]) -> dict[OffsetRange, int]:
    return {r: pc.sum(in_range(table, r)).as_py() or 0 for r in ranges}


def check_nothing_dropped(markers: list[RangeMarker], written: list[pa.Table]) -> None:
    """Raise :class:`DroppedRecordsError` unless rows + quarantined written = records read, per range."""
    if not markers:
        return
    ranges = [m.range for m in markers]
    counts = _count_by_range(pa.concat_tables(written), ranges) if written else dict.fromkeys(ranges, 0)
    for m in markers:
        if counts[m.range] != m.records:
            raise DroppedRecordsError(
                f"{m.range}: the source read {m.records} records but {counts[m.range]} rows were written "
                "(rows + quarantined); refusing to commit"
            )


class IcebergStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict[str, str]):
        options = {k.lower(): v for k, v in options.items()}  # Spark lower-cases option keys
        self.cfg = PipelineConfig.from_json(options["pipeline"])
        self.run_id = options["runid"]
        # Executors write under the tables' locations without opening the catalog themselves.
        self.data_location = options["datalocation"]
        self.quarantine_location = options["quarantinelocation"]
        self.report_path = options.get("reportpath")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
        fs = filesystem(self.cfg.target)
        data = FileSet(fs, self.data_location, table_schema(self.cfg.format.fields), self.run_id)
        bad = FileSet(fs, self.quarantine_location, QUARANTINE_SCHEMA, self.run_id)
        msg = WrittenFiles(started_at=time.time())
        written = []
        for batch in iterator:
            is_marker = pc.is_valid(batch.column("range_marker"))
            for row in batch.filter(is_marker).select(["kafka_topic", "kafka_partition", "range_marker"]).to_pylist():
                msg.markers.append(RangeMarker.from_row(row["kafka_topic"], row["kafka_partition"],
                                                        row["range_marker"]))
            records = batch.filter(pc.invert(is_marker))
            if records.num_rows == 0:
                continue
            ok, quarantined = split_records(records, self.cfg.format, self.run_id)
            data.write(ok)
            bad.write(quarantined)
            faults.pause("while-writing")
            msg.rows += ok.num_rows
            msg.quarantined += quarantined.num_rows
            written += [ok.select(list(COORDINATES)), quarantined.select(list(COORDINATES))]
        msg.data_files, msg.quarantine_files = data.close(), bad.close()
        check_nothing_dropped(msg.markers, written)
        return msg

    def commit(self, messages: Sequence[WrittenFiles | None], batchId: int) -> None:
        msgs = [m for m in messages if m is not None]
        markers = [mk for m in msgs for mk in m.markers]
        if not markers:
            return  # an empty batch commits nothing and never fails
        ranges = [mk.range for mk in markers]
        lost = [r for mk in markers for r in mk.lost]
        records = sum(mk.records for mk in markers)
        rows, quarantined = sum(m.rows for m in msgs), sum(m.quarantined for m in msgs)
        faults.pause("before-commit")
        faults.maybe_fail("before-commit")
        started = time.perf_counter()
        tables = ensure_tables(self.cfg)
        fs = filesystem(self.cfg.target)

        def commit(table, files: list[str]):
            return commit_batch(table, BatchCommit(self.cfg.name, self.run_id, batchId, ranges, files, lost, records),
                                lambda files_, keep: rewrite_files(fs, files_, keep, table.location()))

        q_files = [f for m in msgs for f in m.quarantine_files]
        if q_files:
            commit(tables.quarantine, q_files)
        result = commit(tables.data, [f for m in msgs for f in m.data_files])
        faults.maybe_fail("after-commit")
        if self.report_path:
            append_report(Path(self.report_path), BatchReport(
                batch_id=batchId, at=time.time(), seconds=round(time.time() - min(m.started_at for m in msgs), 3),
                offsets=sum(r.size for r in ranges), records=records, rows=rows, quarantined=quarantined,
                committed=result.committed, skipped=result.skipped, snapshot_id=result.snapshot_id,
                commit_ms=round((time.perf_counter() - started) * 1000, 1)))


class IcebergSinkDataSource(DataSource):
    """Write-only data source: ``df.writeStream.format("tailfill_iceberg")``."""

    @classmethod
    def name(cls) -> str:
        return "tailfill_iceberg"

    def schema(self) -> str:
        return spark_ddl(RAW_SCHEMA)

    def streamWriter(self, schema: StructType, overwrite: bool) -> IcebergStreamWriter:
        return IcebergStreamWriter(dict(self.options))
