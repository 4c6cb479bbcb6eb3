"""Commit, the second phase: one micro-batch's prepared files into the tables, exactly once per offset.

On the driver: the quarantine table first, then the data table with the offset ledger (both through
:func:`tailfill.lake.ledger.commit_batch`, idempotent by offsets). Writers that commit at the same
time — backfill lanes, a tail, upkeep, in any process — are handled by the ledger's optimistic
concurrency: each commit re-reads the ledger and keeps only the offsets no one committed first.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow.fs as pafs

from tailfill.errors import LakeError
from tailfill.lake.audit_log import audit_log
from tailfill.lake.batch_files import DEFAULT_TARGET_FILE_BYTES, one_per_partition
from tailfill.lake.batch_summary import BatchSummary
from tailfill.lake.files import rewrite_files, rows_in
from tailfill.lake.ledger import CommitResult, commit_batch
from tailfill.lake.orphan_fence import renew
from tailfill.lake.prepare import PreparedRange
from tailfill.lake.schema_change import follow_files
from tailfill.lake.tables import Tables
from tailfill.offsets import OffsetRange, intersect_all
from tailfill.state.store import StateStore


@dataclass(frozen=True)
class Committer:
    """Where a pipeline's batches are committed: its tables (opened once per run; each commit refreshes them), the
    filesystem of their files, the state folder of each batch's audit. ``follows_writer_schema``: the rows carry
    their writer schemas' columns, which the data table takes before a batch commits. ``target_file_bytes``: on a
    partitioned table, a batch's files of one table partition are merged into one up to this size first."""

    pipeline: str
    tables: Tables
    fs: pafs.FileSystem
    state: StateStore
    follows_writer_schema: bool = False
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES

    def commit(self, run_id: str, batch_id: int, prepared: Sequence[PreparedRange]) -> tuple[CommitResult, float]:
        """Commit a batch's prepared ranges; returns the data table's result and the seconds it took."""
        started = time.perf_counter()
        if self.tables.data.spec().fields:
            prepared = one_per_partition(self.fs, prepared, self.tables.data.location(), run_id,
                                         self.target_file_bytes)
        summary = BatchSummary(self.pipeline, run_id, batch_id, ranges=[p.marker.range for p in prepared],
                               lost=[r for p in prepared for r in p.marker.lost],
                               records_read=sum(p.marker.records for p in prepared),
                               absent=[r for p in prepared for r in p.marker.absent],
                               absent_under=read_under(prepared))
        fs = self.fs

        def commit(table, files: list[str]) -> CommitResult:
            return commit_batch(table, summary, files,
                                lambda files_, keep: rewrite_files(fs, files_, keep, table.location(), run_id),
                                lambda kept: records_in(fs, prepared, kept), audit_log(self.state, table),
                                lambda table_, files_: renew(table_, fs, files_, run_id))

        data_files = [f for p in prepared for f in p.data_files]
        if self.follows_writer_schema:  # new columns first: nothing committed if it cannot
            follow_files(self.tables.data, fs, data_files)
        quarantine_files = [f for p in prepared for f in p.quarantine_files]
        if quarantine_files:
            commit(self.tables.quarantine, quarantine_files)
        result = commit(self.tables.data, data_files)
        return result, time.perf_counter() - started

    def merged(self) -> dict[str, int] | None:
        """What the latest commit's merge did with its changes, by outcome (None: this commit appends only)."""
        return None


def read_under(prepared: Sequence[PreparedRange]) -> str | None:
    """The isolation level a batch's ranges were read under (one consumer setting reads them all)."""
    levels = {p.marker.isolation for p in prepared}
    if len(levels) > 1:
        raise LakeError(f"one batch's ranges were read under different isolation levels {sorted(levels)}: a batch "
                        "reads with one consumer setting; refusing to commit")
    return levels.pop() if levels else None


def catalog_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the catalog's server could not be reached (refused, dropped), not that a commit failed.

    A SQLite catalog has no server: of its errors only a database locked by another writer past the driver's wait
    is passing; one that cannot be opened or written is not, and is the commit's failure.
    """
    import sqlite3

    import requests
    from sqlalchemy.exc import InterfaceError, OperationalError

    if not isinstance(exc, OperationalError | InterfaceError | requests.exceptions.ConnectionError):
        return False
    cause = getattr(exc, "orig", None)
    return not isinstance(cause, sqlite3.Error) or "database is locked" in str(cause)


def records_in(fs: pafs.FileSystem, prepared: Sequence[PreparedRange], kept: list[OffsetRange]) -> int:
    """Records the source read in the ``kept`` part of a batch (when another writer committed the rest).

    A range kept whole counts what its task read; a range kept in part counts its stored rows and
    quarantined rows there (every record read became one or the other; absent offsets became neither), in any of
    the batch's files (one file may hold several ranges' rows).
    """
    count, partly = 0, []
    for p in prepared:
        parts = intersect_all([p.marker.range], kept)
        if parts == [p.marker.range]:
            count += p.marker.records
        else:
            partly += parts
    return count + (rows_in(fs, [f for p in prepared for f in p.files], partly) if partly else 0)
