"""Read what the completeness check needs from the tables: commits, stored offsets, a run's rows.

Only the two coordinate columns are read for offset accounting, from the files whose offset bounds (in the
manifest) meet the ranges in question, so checking a run costs in proportion to the run, not the table. Each
file is read with Parquet's own reader, several at once: a partitioned table has many small files, and reading
them through pyiceberg's scan (a row filter bound, evaluated and applied per file in Python) cost ten times more.
A table with delete files is read through pyiceberg's scan, which applies them. The
commits are the batch summaries of the live snapshots plus the durable audit written with each
commit and archived at expiry (:mod:`tailfill.lake.audit_log`). A data or quarantine file that the table
references but that cannot be read (deleted or damaged behind the table's back) is not an error
of the check: it becomes a :class:`DamagedFile` naming the offset ranges it held, from the file's
column bounds in the manifest.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import reduce

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow
from pyiceberg.table import DataScan, FileScanTask, Table

from tailfill.lake.audit_log import AuditLog, all_batch_summaries
from tailfill.lake.batch_summary import BatchSummary
from tailfill.lake.files import range_filter
from tailfill.offsets import OffsetRange, TopicPartition, intersect_all, merge
from tailfill.plumbing.warehouse import fs_path
from tailfill.proof.completeness import Offsets
from tailfill.values.schema import COORDINATES


def committed_batches(audit: AuditLog, table: Table, run_id: str | None = None) -> list[BatchSummary]:
    """The batches committed to ``table`` (all, or one run's), from its durable audit and live snapshots,
    oldest first."""
    table.refresh()
    batches = [BatchSummary.from_properties(s) for s in all_batch_summaries(audit, table)]
    return [b for b in batches if run_id is None or b.run_id == run_id]


READERS = 8  # files read at once (small files: the time is the filesystem's, which the reads overlap)


@dataclass(frozen=True)
class DamagedFile:
    """A file the table references that could not be read, and the committed offsets it held."""

    table: str
    path: str
    ranges: list[OffsetRange]
    error: str

    def problem(self) -> str:
        held = ", ".join(map(str, self.ranges)) or "offsets unknown (no column bounds)"
        return f"unreadable {self.table} file {self.path} held {held}: {self.error}"

    def to_dict(self) -> dict:
        return {"table": self.table, "path": self.path, "ranges": [str(r) for r in self.ranges], "error": self.error}


def _bounds(table: Table, task: FileScanTask) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """A file's (partition, offset) bounds, each (lowest, highest), from the manifest (None: not recorded)."""
    schema, file = table.schema(), task.file
    bounds = []
    for name in ("kafka_partition", "kafka_offset"):
        field = schema.find_field(name)
        lo, hi = (file.lower_bounds or {}).get(field.field_id), (file.upper_bounds or {}).get(field.field_id)
        if lo is None or hi is None:
            return None
        bounds.append((from_bytes(field.field_type, lo), from_bytes(field.field_type, hi)))
    return bounds[0], bounds[1]


def _held_ranges(table: Table, task: FileScanTask, committed: list[OffsetRange]) -> list[OffsetRange]:
    """The committed offsets a file held, from its partition and offset bounds in the manifest."""
    bounds = _bounds(table, task)
    if bounds is None:
        return []
    (p_lo, p_hi), (o_lo, o_hi) = bounds
    topics = sorted({r.topic for r in committed})
    span = [OffsetRange(t, p, o_lo, o_hi + 1) for t in topics for p in range(p_lo, p_hi + 1)]
    return intersect_all(span, committed)


def _may_hold(table: Table, task: FileScanTask, windows: list[OffsetRange]) -> bool:
    """Whether a file's bounds meet one of ``windows`` (a file without bounds may hold anything)."""
    bounds = _bounds(table, task)
    if bounds is None:
        return True
    (p_lo, p_hi), (o_lo, o_hi) = bounds
    return any(p_lo <= w.partition <= p_hi and w.start <= o_hi and o_lo < w.end for w in windows)


def _in_windows(rows: pa.Table, windows: list[OffsetRange]) -> pa.ChunkedArray:
    """Boolean mask of the rows within ``windows``, by partition and offset (as
    :func:`tailfill.lake.files.range_filter`)."""
    terms = [pc.and_(pc.equal(rows["kafka_partition"], w.partition),
                     pc.and_(pc.greater_equal(rows["kafka_offset"], w.start), pc.less(rows["kafka_offset"], w.end)))
             for w in merge(windows)]
    return reduce(pc.or_, terms) if terms else pa.chunked_array([pa.repeat(False, rows.num_rows)])


def _read_file(fs: pafs.FileSystem, uri: str, schema: pa.Schema) -> pa.Table:
    """The columns of ``schema`` in one data file, as ``schema`` types them (a column the file predates: nulls)."""
    parquet = pq.ParquetFile(fs_path(uri), filesystem=fs)
    held = set(parquet.schema_arrow.names)
    rows = parquet.read(columns=[n for n in schema.names if n in held])
    return pa.table([rows[f.name].cast(f.type) if f.name in held else pa.nulls(rows.num_rows, f.type)
                     for f in schema], schema=schema)


def read_rows(table: Table, fs: pafs.FileSystem, windows: list[OffsetRange] | None, columns: Sequence[str],
              label: str, committed: list[OffsetRange]) -> tuple[pa.Table, list[DamagedFile]]:
    """The rows of ``table`` within ``windows`` (None: all), only ``columns``, and the files that could not be read
    (with the ``committed`` offsets each held): the files whose bounds meet the windows, read side by side."""
    table.refresh()
    scan = table.scan(selected_fields=tuple(dict.fromkeys([*columns, "kafka_partition", "kafka_offset"])))
    tasks = [t for t in scan.plan_files() if windows is None or _may_hold(table, t, windows)]
    if any(t.delete_files for t in tasks):  # rows deleted by other files: pyiceberg's scan applies them
        return read_scan(table, table.scan(row_filter=range_filter(windows), selected_fields=tuple(columns)), label,
                         committed)
    schema = schema_to_pyarrow(scan.projection(), include_field_ids=False)

    def read(task: FileScanTask) -> pa.Table | DamagedFile:
        try:
            return _read_file(fs, task.file.file_path, schema)
        except Exception as exc:  # a damaged file is a finding, reported with its error
            return DamagedFile(label, task.file.file_path, _held_ranges(table, task, committed), _one_line(exc))

    with ThreadPoolExecutor(max_workers=READERS) as pool:
        results = list(pool.map(read, tasks))
    tables = [r for r in results if isinstance(r, pa.Table)]
    rows = pa.concat_tables(tables) if tables else schema.empty_table()
    if windows is not None:
        rows = rows.filter(_in_windows(rows, windows))
    return rows.select(list(columns)), [r for r in results if isinstance(r, DamagedFile)]


def _one_line(exc: Exception) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text[:300]}"


def read_scan(table: Table, scan: DataScan, label: str,
              committed: list[OffsetRange]) -> tuple[pa.Table, list[DamagedFile]]:
    """All rows of ``scan``; if a file cannot be read, the others' rows and the damaged files."""
    try:
        return scan.to_arrow(), []
    except Exception:  # which files? Read them one by one below; each is reported with its cause
        pass
    reader = ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter, scan.case_sensitive)

    def read(task: FileScanTask) -> pa.Table | DamagedFile:
        try:
            return reader.to_table([task])
        except Exception as exc:  # a damaged file is a finding, reported with its error
            return DamagedFile(label, task.file.file_path, _held_ranges(table, task, committed), _one_line(exc))

    # Not pyiceberg's shared executor: reading a task uses it too, and waiting on it from it deadlocks.
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        results = list(pool.map(read, scan.plan_files()))
    tables = [r for r in results if isinstance(r, pa.Table)]
    empty = schema_to_pyarrow(scan.projection(), include_field_ids=False).empty_table()
    return (pa.concat_tables(tables, promote_options="permissive") if tables else empty,
            [r for r in results if isinstance(r, DamagedFile)])


def _sorted_offsets(arrow: pa.Table) -> dict[TopicPartition, np.ndarray]:
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


def stored_offsets(data: Table, quarantine: Table, fs: pafs.FileSystem, windows: list[OffsetRange] | None,
                   committed: list[OffsetRange], columns: Sequence[str] = ()
                   ) -> tuple[dict[TopicPartition, Offsets], list[DamagedFile], pa.Table]:
    """Sorted offsets stored in the data and quarantine tables (files on ``fs``) within ``windows`` (None: all), the
    files that could not be read (with the ``committed`` offsets each held), and the data table's rows there with
    ``columns`` beside the coordinates (each file is read once for both)."""
    wanted = tuple(dict.fromkeys([*COORDINATES, *columns]))
    data_rows, bad_data = read_rows(data, fs, windows, wanted, "data", committed)
    bad_rows, bad_quarantine = read_rows(quarantine, fs, windows, COORDINATES, "quarantine", committed)
    rows, bad = _sorted_offsets(data_rows), _sorted_offsets(bad_rows)
    empty = np.empty(0, np.int64)
    offsets = {tp: Offsets(rows.get(tp, empty), bad.get(tp, empty)) for tp in set(rows) | set(bad)}
    return offsets, [*bad_data, *bad_quarantine], data_rows


def run_rows(rows: pa.Table, windows: list[OffsetRange], columns: list[str]) -> pa.Table:
    """Of a table's ``rows`` (with their coordinates), those within ``windows`` (a run's committed ranges), only
    ``columns``."""
    return rows.filter(_in_windows(rows, windows)).select(columns)
