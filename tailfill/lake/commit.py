"""Commit, the second phase: one micro-batch's prepared files into the tables, exactly once per offset.

On the driver: the quarantine table first, then the data table with the offset ledger (both through
:func:`tailfill.lake.ledger.commit_batch`, idempotent by offsets). Commits from several queries of
one process (concurrent backfill slices) take turns; other processes are handled by optimistic
concurrency in the ledger.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from tailfill.config import PipelineConfig
from tailfill.lake.files import rewrite_files
from tailfill.lake.ledger import BatchCommit, CommitResult, commit_batch
from tailfill.lake.prepare import PreparedRange
from tailfill.lake.storage import filesystem
from tailfill.lake.tables import Tables

_TURNS = threading.Lock()


def commit_prepared(cfg: PipelineConfig, tables: Tables, run_id: str, batch_id: int,
                    prepared: Sequence[PreparedRange]) -> tuple[CommitResult, float]:
    """Commit a batch's prepared ranges to ``tables`` (opened once per run; each commit refreshes them);
    returns the data table's result and the seconds it took."""
    ranges = [p.marker.range for p in prepared]
    lost = [r for p in prepared for r in p.marker.lost]
    records = sum(p.marker.records for p in prepared)
    fs = filesystem(cfg.target)
    with _TURNS:
        started = time.perf_counter()

        def commit(table, files: list[str]) -> CommitResult:
            return commit_batch(table, BatchCommit(cfg.name, run_id, batch_id, ranges, files, lost, records),
                                lambda files_, keep: rewrite_files(fs, files_, keep, table.location(), run_id))

        quarantine_files = [f for p in prepared for f in p.quarantine_files]
        if quarantine_files:
            commit(tables.quarantine, quarantine_files)
        result = commit(tables.data, [f for p in prepared for f in p.data_files])
        return result, time.perf_counter() - started
