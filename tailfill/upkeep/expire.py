"""Snapshot expiry that keeps the proof: archive the batch audit first, then expire.

Every micro-batch commit adds a snapshot, and the table's metadata file (read and rewritten by
every commit) grows with each one: commit cost grows with the snapshot count. Expiry removes
snapshots older than the retention, always keeping the most recent ``keep_last`` (and the current
one). The summaries of the snapshots about to go are first written to the table's durable audit
record (:mod:`tailfill.lake.audit_log`); files they alone referenced become orphans, removed later
by :mod:`tailfill.upkeep.orphans` once old enough.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from tailfill.errors import CommitConflictError
from tailfill.lake.audit_log import AuditLog
from tailfill.lake.ledger import COMMIT_ATTEMPTS, batch_summaries, commit_attempts

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ExpiryResult:
    """What one expiry of one table did."""

    table: str
    expired: int
    archived: int  # batch summaries carried into the durable audit record
    archive: str | None
    snapshots_left: int

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def expire(table: Table, audit: AuditLog, older_than: datetime, keep_last: int) -> ExpiryResult:
    """Expire snapshots of ``table`` taken before ``older_than``, keeping the newest ``keep_last``."""
    try:
        for attempt in commit_attempts():
            with attempt:
                return _expire_once(table, audit, older_than, keep_last)
    except CommitFailedException:
        raise CommitConflictError(f"snapshot expiry of {table.name()} kept conflicting after {COMMIT_ATTEMPTS} "
                                  "attempts") from None
    raise AssertionError("unreachable: the last attempt returns or raises")


def _expire_once(table: Table, audit: AuditLog, older_than: datetime, keep_last: int) -> ExpiryResult:
    """One attempt of :func:`expire`; CommitFailedException when another writer (or expiry) came first."""
    table.refresh()
    snaps = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    # Everything taken before the cutoff goes, except the newest keep_last (and branch heads).
    cutoff_ms = min([int(older_than.timestamp() * 1000), *[s.timestamp_ms for s in snaps[-keep_last:]]])
    current = table.current_snapshot()
    going_ids = {s.snapshot_id for s in snaps if s.timestamp_ms < cutoff_ms
                 and (current is None or s.snapshot_id != current.snapshot_id)}
    if not going_ids:
        return ExpiryResult(".".join(table.name()), 0, 0, None, len(snaps))
    when = {s.snapshot_id: s.timestamp_ms for s in snaps}
    going = [{**s, "timestamp-ms": str(when[int(s["snapshot-id"])])}
             for s in batch_summaries(table) if int(s["snapshot-id"]) in going_ids]
    archive = audit.archive(going)  # one object, durable before the snapshots go
    try:
        expiry = table.maintenance.expire_snapshots().older_than(EPOCH + timedelta(milliseconds=cutoff_ms))
        expiry.commit()
    except ValueError as exc:  # another run expired one of them first: a conflict like any other
        raise CommitFailedException(str(exc)) from exc
    audit.drop_batches(sorted(going_ids))  # their per-commit objects: the archive holds them now
    table.refresh()
    return ExpiryResult(".".join(table.name()), len(going_ids), len(going), archive, len(table.snapshots()))
