"""Read what the completeness check needs from the tables: commits, stored offsets, a run's rows.

Only the two coordinate columns are read for offset accounting, with Iceberg's file pruning on
the ranges in question, so checking a run costs in proportion to the run, not the table. The
commits are the batch summaries of the live snapshots plus the durable audit written with each
commit and archived at expiry (:mod:`tailfill.lake.audit_log`). A data or quarantine file that the table
references but that cannot be read (deleted or damaged behind the table's back) is not an error
of the check: it becomes a :class:`DamagedFile` naming the offset ranges it held, from the file's
column bounds in the manifest.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes
from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow
from pyiceberg.table import DataScan, FileScanTask, Table

from tailfill.lake.audit_log import AuditLog, all_batch_summaries
from tailfill.lake.batch_summary import BatchSummary
from tailfill.lake.files import range_filter
from tailfill.offsets import OffsetRange, TopicPartition, intersect_all
from tailfill.proof.completeness import Offsets
from tailfill.values.schema import COORDINATES


def committed_batches(audit: AuditLog, table: Table, run_id: str | None = None) -> list[BatchSummary]:
    """The batches committed to ``table`` (all, or one run's), from its durable audit and live snapshots,
    oldest first."""
    table.refresh()
    batches = [BatchSummary.from_properties(s) for s in all_batch_summaries(audit, table)]
    return [b for b in batches if run_id is None or b.run_id == run_id]


READERS = 4  # files read at once when looking for the damaged ones


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


def _held_ranges(table: Table, task: FileScanTask, committed: list[OffsetRange]) -> list[OffsetRange]:
    """The committed offsets a file held, from its partition and offset bounds in the manifest."""
    schema, file = table.schema(), task.file
    bounds = []
    for name in ("kafka_partition", "kafka_offset"):
        field = schema.find_field(name)
        lo, hi = (file.lower_bounds or {}).get(field.field_id), (file.upper_bounds or {}).get(field.field_id)
        if lo is None or hi is None:
            return []
        bounds.append((from_bytes(field.field_type, lo), from_bytes(field.field_type, hi)))
    (p_lo, p_hi), (o_lo, o_hi) = bounds
    topics = sorted({r.topic for r in committed})
    span = [OffsetRange(t, p, o_lo, o_hi + 1) for t in topics for p in range(p_lo, p_hi + 1)]
    return intersect_all(span, committed)


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


def stored_offsets(data: Table, quarantine: Table, windows: list[OffsetRange] | None,
                   committed: list[OffsetRange]) -> tuple[dict[TopicPartition, Offsets], list[DamagedFile]]:
    """Sorted offsets stored in the data and quarantine tables within ``windows`` (None: all), and the
    files that could not be read (with the ``committed`` offsets each held)."""
    row_filter = range_filter(windows)
    found = []
    for table, label in ((data, "data"), (quarantine, "quarantine")):
        table.refresh()
        arrow, damaged = read_scan(table, table.scan(row_filter=row_filter, selected_fields=COORDINATES), label,
                                   committed)
        found.append((_sorted_offsets(arrow), damaged))
    (rows, bad_data), (bad, bad_quarantine) = found
    empty = np.empty(0, np.int64)
    offsets = {tp: Offsets(rows.get(tp, empty), bad.get(tp, empty)) for tp in set(rows) | set(bad)}
    return offsets, [*bad_data, *bad_quarantine]


def run_rows(data: Table, windows: list[OffsetRange], columns: list[str]) -> pa.Table:
    """The readable rows of ``data`` within ``windows`` (a run's committed ranges), only ``columns``."""
    data.refresh()
    scan = data.scan(row_filter=range_filter(windows), selected_fields=tuple(columns))
    return read_scan(data, scan, "data", windows)[0]
