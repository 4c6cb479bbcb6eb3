"""The offset ledger: which Kafka offsets a table holds, committed atomically with the data.

Each micro-batch commit is one Iceberg transaction that (1) adds the batch's data files with a
snapshot summary naming pipeline, run id, batch id and the exact ``[start, end)`` ranges it
covers, and (2) updates the table property holding the merged ranges of all commits. The
property is the resume position (it survives snapshot expiry); the summaries are the audit trail,
also written before the commit to the durable audit log, whose chain head (:data:`AUDIT_HEAD`) the
same transaction moves (:mod:`tailfill.lake.audit_log`), so they outlive any snapshot expiry.

Commits are idempotent by offsets: a batch whose ranges are already in the ledger commits
nothing; one that partly overlaps keeps only the rows of the uncommitted part.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

import tenacity
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table, TableProperties, Transaction
from sqlalchemy.exc import SQLAlchemyError

from tailfill.errors import CommitConflictError, LakeError
from tailfill.lake.batch_summary import BatchSummary
from tailfill.lake.data_files import data_files
from tailfill.lake.transaction import transaction
from tailfill.offsets import (
    OffsetRange,
    PartitionOffsets,
    intersect_all,
    merge,
    ranges_from_json,
    ranges_to_json,
    subtract,
)
from tailfill.plumbing.disk import naming_full_disk
from tailfill.plumbing.retry import ExceptionTypes, retrying

COMMITTED_PROP = "tailfill.committed-ranges"
AUDIT_HEAD = "tailfill.audit-head"  # the snapshot id of the latest batch commit (its audit's chain starts there)
PREVIOUS_AUDIT = "tailfill.previous-audit"  # in a batch's summary: the head its commit replaced
LOST_PROP = "tailfill.lost-ranges"
CUTOVER_PROP = "tailfill.cutover"
MAINTENANCE_SUMMARY = "tailfill.maintenance"  # in an upkeep snapshot's summary: what it did

COMMIT_ATTEMPTS = 20
DEFAULT_NAME_MAPPING = TableProperties.DEFAULT_NAME_MAPPING


@dataclass(frozen=True)
class Ledger:
    """Offsets committed to one table, and offsets recorded as lost (expired before ingest).

    ``committed`` covers every range a batch finished, lost offsets included (so resume moves past
    them); ``lost`` says which of those offsets never reached the table.
    """

    committed: list[OffsetRange] = field(default_factory=list)
    lost: list[OffsetRange] = field(default_factory=list)

    def position(self, tp_start: PartitionOffsets) -> PartitionOffsets:
        """Where to resume per partition: the end of the contiguous committed run from ``tp_start``."""
        out = {}
        for tp in tp_start:
            pos = tp_start[tp]
            for r in merge(self.committed):
                if r.tp == tp and r.start <= pos < r.end:
                    pos = r.end
            out[tp] = pos
        return PartitionOffsets(out)


def commit_attempts(on: ExceptionTypes = CommitFailedException) -> tenacity.Retrying:
    """Attempts at an optimistic Iceberg commit: each conflict (``on``) is tried again from a fresh read,
    backing off more after each (up to 2 s); the last conflict is raised."""
    return retrying(COMMIT_ATTEMPTS, on=on, first_wait=0.05, max_wait=2.0)


def read_ledger(table: Table) -> Ledger:
    props = table.properties
    return Ledger(ranges_from_json(props.get(COMMITTED_PROP)), ranges_from_json(props.get(LOST_PROP)))


def read_cutover(table: Table) -> PartitionOffsets | None:
    text = table.properties.get(CUTOVER_PROP)
    return PartitionOffsets.from_json(text) if text else None


def record_cutover(table: Table, cutover: PartitionOffsets,
                   beside: Callable[[dict[str, str]], dict[str, str]] | None = None) -> PartitionOffsets:
    """Record where history ends and the tail begins, once per pipeline, with the properties ``beside(properties)``
    gives in the same commit; returns the recorded one."""

    def once(props: dict[str, str]) -> tuple[dict[str, str], PartitionOffsets]:
        text = props.get(CUTOVER_PROP)
        if text:
            return {}, PartitionOffsets.from_json(text)
        return {CUTOVER_PROP: cutover.to_json(), **(beside(props) if beside else {})}, cutover

    return record_properties(table, f"the cutover {cutover.to_json()}", once)


T = TypeVar("T")


def record_properties(table: Table, what: str, change: Callable[[dict[str, str]], tuple[dict[str, str], T]]) -> T:
    """Set the properties ``change(properties)`` gives (none: nothing to set) from a fresh read of ``table``, retrying
    concurrency conflicts; returns what ``change`` returned beside them. ``what`` names the change in errors."""
    try:
        for attempt in commit_attempts():
            with attempt:
                table.refresh()
                props, result = change(dict(table.properties))
                if props:
                    with transaction(table) as tx:
                        tx.set_properties(props)
                return result
    except CommitFailedException:
        raise CommitConflictError(f"could not record {what} on {table.name()} after {COMMIT_ATTEMPTS} "
                                  "attempts") from None
    except (OSError, SQLAlchemyError) as exc:  # the warehouse or the catalog failed: say which, and what
        raise LakeError(f"cannot record {what} on {'.'.join(table.name())}: "
                        f"{str(exc).splitlines()[0]}") from exc
    raise AssertionError("unreachable: the last attempt returns or raises")


@dataclass(frozen=True)
class CommitResult:
    committed: list[OffsetRange]
    skipped: list[OffsetRange]
    snapshot_id: int | None


Rewriter = Callable[[Sequence[str], list[OffsetRange]], list[str]]
Renewer = Callable[[Table, list[str]], list[str]]  # the files to commit, those an orphan cleanup may take copied


class AuditWriter(Protocol):
    """Where a batch's summary is written with its commit (:class:`tailfill.lake.audit_log.AuditLog`)."""

    def write_batch(self, snapshot_id: int, summary: dict[str, str]) -> None: ...

    def drop_batches(self, snapshot_ids: list[int]) -> None: ...


def commit_batch(table: Table, batch: BatchSummary, files: Sequence[str], rewrite: Rewriter,
                 records_in: Callable[[list[OffsetRange]], int] | None = None,
                 audit: AuditWriter | None = None, renew: Renewer | None = None) -> CommitResult:
    """Commit ``batch`` (its ``files``) to ``table`` exactly once per offset; retries concurrency conflicts.

    ``rewrite(files, keep)`` must return new files holding only the rows whose offsets lie in
    ``keep``; it is called only when part of the batch is already committed. The snapshot's summary
    is ``batch`` with the ranges it actually committed; ``records_in(ranges)`` gives the records read
    in those ranges when they are only part of the batch (the proof compares them with what is stored).
    With ``audit``, the summary is also written there before the commit, and the table's
    :data:`AUDIT_HEAD` moves to the new snapshot in the same transaction (the audit survives any expiry).
    ``renew(table, files)``, on the table each attempt reads, replaces the files an orphan cleanup may delete
    (:func:`tailfill.lake.orphan_fence.renew`).
    """
    asked = merge(batch.ranges)
    try:
        for attempt in commit_attempts():
            with attempt:
                return _commit_once(table, batch, asked, files, rewrite, records_in, audit, renew)
    except CommitFailedException:
        raise CommitConflictError(f"commit of batch {batch.batch_id} (run {batch.run_id}) to {table.name()} kept "
                                  f"conflicting after {COMMIT_ATTEMPTS} attempts") from None
    raise AssertionError("unreachable: the last attempt returns or raises")


def _commit_once(table: Table, batch: BatchSummary, asked: list[OffsetRange], files: Sequence[str],
                 rewrite: Rewriter, records_in: Callable[[list[OffsetRange]], int] | None,
                 audit: AuditWriter | None, renew: Renewer | None) -> CommitResult:
    """One attempt of :func:`commit_batch`, from a fresh read of the ledger; CommitFailedException on a conflict."""
    table.refresh()
    ledger = read_ledger(table)
    new = subtract(asked, ledger.committed)
    if not new:
        return CommitResult([], asked, None)
    kept = list(files) if new == asked else rewrite(files, new)
    if renew is not None:
        with naming_full_disk("a fresh copy of the batch's files (older than the orphan cleanup's cutoff) in",
                              table.location()):
            kept = renew(table, kept)
    lost = intersect_all(subtract(batch.lost, ledger.lost), new)
    absent = intersect_all(batch.absent, new) if batch.absent is not None else None
    records = batch.records_read if new == asked or records_in is None else records_in(new)
    summary = replace(batch, ranges=new, lost=lost, records_read=records, absent=absent).to_properties()
    if audit is not None and AUDIT_HEAD in table.properties:
        summary[PREVIOUS_AUDIT] = table.properties[AUDIT_HEAD]
    snapshot_id = None
    try:
        with naming_full_disk("the commit's metadata (or the catalog) of", table.location()), \
                transaction(table) as tx:
            if kept:
                map_by_name(tx)
            # Not add_files: it infers partitions from column bounds (refusing bucket); files record theirs.
            entries = data_files(table.io, tx.table_metadata, kept)
            with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
                for entry in entries:  # none: nothing to store (all quarantined / absent), but the ranges are done
                    append.append_data_file(entry)
                snapshot_id = append.snapshot_id
            props = {COMMITTED_PROP: ranges_to_json(merge([*ledger.committed, *new]))}
            if audit is not None:
                audit.write_batch(snapshot_id, summary)  # durable before the commit that makes it true
                props[AUDIT_HEAD] = str(snapshot_id)
            if lost:
                props[LOST_PROP] = ranges_to_json(merge([*ledger.lost, *lost]))
            tx.set_properties(props)
    except CommitFailedException:
        if audit is not None and snapshot_id is not None:  # off the chain anyway; one object less to list
            audit.drop_batches([snapshot_id])
        raise
    table.refresh()
    return CommitResult(new, subtract(asked, new), table.current_snapshot().snapshot_id)


def map_by_name(tx: Transaction) -> None:
    """Give the table a name mapping if it has none: the files Tailfill writes carry no field ids."""
    if tx.table_metadata.name_mapping() is None:
        tx.set_properties({DEFAULT_NAME_MAPPING: tx.table_metadata.schema().name_mapping.model_dump_json()})


def batch_summaries(table: Table) -> list[dict[str, str]]:
    """The tailfill snapshot summaries of ``table``, oldest first (the audit trail)."""
    out = []
    for snap in table.snapshots():
        props = snap.summary.additional_properties if snap.summary else {}
        if BatchSummary.recorded_in(props):
            out.append({"snapshot-id": str(snap.snapshot_id), "timestamp-ms": str(snap.timestamp_ms), **props})
    return out
