"""Compaction: rewrite a table's small data files into files of a target size, offsets kept.

Every micro-batch adds at least one small file per task. Files smaller than the target are grouped
by the Kafka partitions they hold (from their column bounds in the manifest: one partition per
file in the normal case) and by their Iceberg partition (``target.partition_by``), read, sorted by
``(topic, partition, offset)`` and written again into files that roll over once they reach the
target; one Iceberg overwrite removes the old files and adds the new ones atomically, so a reader
sees either set, never both. Rows keep their coordinate columns, so the offset proof reads the
same offsets afterwards. A group's files end up at most ``bytes / target + 1``.

A concurrent commit (a tail or backfill batch) makes the overwrite conflict: it is retried on the
refreshed table as long as the rewritten files are all still live; if another compaction took
them first, or an orphan cleanup fenced the table since the new files were written
(:mod:`tailfill.lake.orphan_fence`), the new files are deleted (they were never referenced) and
nothing is committed; the next upkeep compacts again.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from tailfill.errors import CommitConflictError, LakeError
from tailfill.lake.data_files import data_file
from tailfill.lake.files import PARQUET_OPTIONS, new_file_uri
from tailfill.lake.ledger import COMMIT_ATTEMPTS, MAINTENANCE_SUMMARY, commit_attempts
from tailfill.lake.orphan_fence import outlived
from tailfill.lake.transaction import transaction
from tailfill.plumbing.warehouse import fs_path, make_dirs

CHUNKS_PER_FILE = 8  # rows are written in about this many chunks per target-sized file


@dataclass(frozen=True)
class CompactionResult:
    """What one compaction of one table did."""

    table: str
    files_removed: int
    files_added: int
    bytes_rewritten: int
    data_files: int  # live data files afterwards
    data_bytes: int

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def _partition_bounds(table: Table, file: DataFile) -> tuple[int, int] | None:
    field = table.schema().find_field("kafka_partition")
    lo, hi = (file.lower_bounds or {}).get(field.field_id), (file.upper_bounds or {}).get(field.field_id)
    return None if lo is None or hi is None else (from_bytes(field.field_type, lo), from_bytes(field.field_type, hi))


def write_rolling(fs: pafs.FileSystem, location: str, rows: pa.Table, target_bytes: int) -> list[str]:
    """Write ``rows`` in order into files that close once they reach ``target_bytes``."""
    if rows.num_rows == 0:
        return []
    per_row = max(rows.nbytes / rows.num_rows, 1.0)
    chunk = max(int(target_bytes / per_row / CHUNKS_PER_FILE), 1)
    make_dirs(fs, f"{location.rstrip('/')}/data")
    uris: list[str] = []
    sink = writer = None
    for start in range(0, rows.num_rows, chunk):
        if writer is None:
            uris.append(new_file_uri(location, "compact"))
            sink = fs.open_output_stream(fs_path(uris[-1]))
            writer = pq.ParquetWriter(sink, rows.schema, **PARQUET_OPTIONS)
        writer.write_table(rows.slice(start, chunk))
        if sink.tell() >= target_bytes:
            writer.close()
            sink.close()
            sink = writer = None
    if writer is not None:
        writer.close()
        sink.close()
    return uris


def _read(fs: pafs.FileSystem, uri: str) -> pa.Table:
    try:
        return pq.read_table(fs_path(uri), filesystem=fs)
    except (OSError, pa.ArrowException) as exc:
        raise LakeError(f"cannot compact: data file {uri} is unreadable ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}); `tailfill validate --all` names the "
                        "offsets it held") from exc


def _commit_rewrite(table: Table, fs: pafs.FileSystem, old: Sequence[DataFile], new: list[tuple[str, Record]]) -> bool:
    """Swap ``old`` for ``new`` (files and their partitions) in one overwrite; False if ``old`` is no longer
    all live, or if an orphan cleanup fenced the table since ``new`` was written and may delete them."""
    wanted = {f.file_path for f in old}
    new_files = [data_file(table.io, table.metadata, uri, partition) for uri, partition in new]  # footers read once
    try:
        for attempt in commit_attempts(on=(CommitFailedException, ValidationException)):
            with attempt:
                table.refresh()
                live = {t.file.file_path: t.file for t in table.scan().plan_files()}
                if not wanted <= set(live) or outlived(table, fs, [uri for uri, _ in new]):
                    return False
                with transaction(table) as tx, tx.update_snapshot(
                        snapshot_properties={MAINTENANCE_SUMMARY: "compaction"}).overwrite() as overwrite:
                    for path in sorted(wanted):
                        overwrite.delete_data_file(live[path])
                    for f in new_files:
                        overwrite.append_data_file(f)
                return True
    except (CommitFailedException, ValidationException):
        raise CommitConflictError(f"compaction of {table.name()} kept conflicting after {COMMIT_ATTEMPTS} "
                                  "attempts") from None
    raise AssertionError("unreachable: the last attempt returns or raises")


def compact(table: Table, fs: pafs.FileSystem, target_bytes: int) -> CompactionResult:
    """Rewrite the small data files of ``table`` into files of about ``target_bytes``, per Kafka partition
    and per Iceberg partition (files of an older partition spec are left as they are)."""
    table.refresh()
    spec_id = table.spec().spec_id
    groups: dict[tuple, list[DataFile]] = defaultdict(list)
    for task in table.scan().plan_files():
        f = task.file
        if f.file_size_in_bytes < target_bytes and not task.delete_files and f.spec_id == spec_id:
            groups[(_partition_bounds(table, f), tuple(f.partition[i] for i in range(len(f.partition))))].append(f)
    old: list[DataFile] = []
    new: list[tuple[str, Record]] = []
    for files in groups.values():
        if len(files) < 2:
            continue
        parts = [_read(fs, f.file_path) for f in files]
        rows = pa.concat_tables(parts, promote_options="permissive").sort_by(
            [("kafka_topic", "ascending"), ("kafka_partition", "ascending"), ("kafka_offset", "ascending")])
        old += files
        new += [(uri, files[0].partition) for uri in write_rolling(fs, table.location(), rows, target_bytes)]
    committed = bool(old) and _commit_rewrite(table, fs, old, new)
    if old and not committed:  # another compaction took these files first, or a cleanup may: never referenced
        for uri, _ in new:
            with contextlib.suppress(FileNotFoundError):  # the cleanup did
                fs.delete_file(fs_path(uri))
    table.refresh()
    live = [t.file for t in table.scan().plan_files()]
    return CompactionResult(".".join(table.name()), len(old) if committed else 0, len(new) if committed else 0,
                            sum(f.file_size_in_bytes for f in old) if committed else 0, len(live),
                            sum(f.file_size_in_bytes for f in live))
