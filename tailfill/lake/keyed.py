"""Keyed tables (``target.mode: upsert``): each batch of changes merged into the state table, exactly once.

Two tables: the data table stays the append-only record of every change, committed with its offset ledger
as in append mode (:class:`~tailfill.lake.commit.Committer`); the **state table** beside it holds each key's
latest row. :class:`KeyedCommitter` commits the change log first, then merges the same offsets into the
state (:class:`StateMerger`), in one catalog commit per batch:

- the batch's changes are folded per key by version (:class:`~tailfill.lake.key_index.Version`: the Kafka
  offset within its partition, or ``target.version_by``'s value); a key's last change wins only if it is
  newer than the version the state applied (the key index), so the state is the fold of all changes by
  version whatever order the backfill and the tail commit in, and a deleted key stays deleted;
- the winners' rows go to one new data file; the rows they replace (and keys deleted) get position deletes
  (:mod:`tailfill.lake.row_delta`): merge-on-read, at a cost that follows the batch;
- a truncate (op ``t``) empties the state as of its version: every key whose last change is older is deleted,
  and a change older than it that is committed later (a backfill after the tail) is superseded
  (:class:`Truncation`; ``target.on_truncate: stop`` stops the merge at it instead, naming it);
- one snapshot (a RowDelta) adds both, and the same transaction sets the state's applied ranges
  (:data:`APPLIED_PROP`), the key index's segment list (:data:`INDEX_PROP`), the latest truncate applied
  (:data:`TRUNCATED_PROP`) and the running counts (:data:`COUNTS_PROP`: every change is inserted, updated,
  deleted, truncated or superseded).

Idempotent by offsets: a merge skips what the state already applied, and a conflict is redone from a
fresh read. A crash between the two tables' commits leaves the state behind the ledger; the next
committer of the pipeline catches up from the change log (never from Kafka) before its first batch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.typedef import Record

from tailfill import failpoints
from tailfill.errors import ChangeStreamError, CommitConflictError, LakeError
from tailfill.lake.commit import Committer
from tailfill.lake.data_files import data_file
from tailfill.lake.files import PARQUET_OPTIONS, in_any, new_file_uri, range_filter
from tailfill.lake.key_index import KeyIndex, Version, encode_keys, newer, paused_gc, segment, segment_of
from tailfill.lake.ledger import (
    COMMIT_ATTEMPTS,
    MAINTENANCE_SUMMARY,
    CommitResult,
    commit_attempts,
    map_by_name,
    read_ledger,
)
from tailfill.lake.orphan_fence import gone_or
from tailfill.lake.prepare import PreparedRange
from tailfill.lake.row_delta import RowDelta, write_position_deletes
from tailfill.lake.transaction import transaction
from tailfill.offsets import OffsetRange, merge, ranges_from_json, ranges_to_json, subtract
from tailfill.plumbing.warehouse import fs_path, make_dirs
from tailfill.values.schema import CDC_OP, DELETE_OP, TRUNCATE_OP

APPLIED_PROP = "tailfill.applied-ranges"  # the change-log offsets the state reflects
INDEX_PROP = "tailfill.key-index"  # the key index's segments, in order (JSON list of URIs)
COUNTS_PROP = "tailfill.keyed-counts"  # every change merged so far: inserted, updated, deleted, superseded
LIVE_PROP = "tailfill.live-rows"  # rows the state holds (no data read to know it)
TRUNCATED_PROP = "tailfill.truncated-at"  # the latest truncate applied: its version, partition, offset (JSON list)
SUMMARY_MERGED = "tailfill.merged-ranges"  # in a state snapshot's summary: the offsets this merge applied
COUNT_NAMES = ("changes", "inserted", "updated", "deleted", "truncated", "superseded")
ORDERED_BY = ("cdc_lsn (Postgres: source.lsn), cdc_binlog (MySQL: source.file and source.pos), cdc_gtid (MySQL with "
              "GTIDs: source.gtid's number; snapshot reads carry none)")  # what each connector's events carry


@dataclass(frozen=True)
class MergeCounts:
    """What a merge did with its changes: each one inserted, updated, deleted, truncated (a truncate applied: it
    emptied the state) or superseded (by a newer change in the batch or already applied, a delete of a key already
    deleted by a newer one, or a change older than a truncate applied)."""

    changes: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    truncated: int = 0
    superseded: int = 0

    def __add__(self, other: MergeCounts) -> MergeCounts:
        return MergeCounts(*(getattr(self, n) + getattr(other, n) for n in COUNT_NAMES))

    def to_dict(self) -> dict[str, int]:
        return {n: getattr(self, n) for n in COUNT_NAMES}

    @classmethod
    def from_json(cls, text: str | None) -> MergeCounts:
        return cls(**json.loads(text)) if text else cls()


def applied_ranges(state: Table) -> list[OffsetRange]:
    """The change-log offsets the state table reflects."""
    return ranges_from_json(state.properties.get(APPLIED_PROP))


def truncated_at(state: Table) -> Version | None:
    """The version of the latest truncate the state applied (None: none)."""
    text = state.properties.get(TRUNCATED_PROP)
    return Version(*json.loads(text)) if text else None


def live_rows(state: Table) -> int:
    """The rows the state table holds (one per live key), as its merges counted them."""
    return int(state.properties.get(LIVE_PROP, 0))


def state_counts(state: Table) -> MergeCounts:
    """Every change merged into the state table so far, by outcome."""
    return MergeCounts.from_json(state.properties.get(COUNTS_PROP))


def merges_by_run(state: Table) -> dict[str, MergeCounts]:
    """What each run's merges did, by outcome, oldest run first (from the state's snapshot summaries: runs whose
    snapshots expired are not listed)."""
    out: dict[str, MergeCounts] = {}
    for snap in state.snapshots():
        props = snap.summary.additional_properties if snap.summary else {}
        if "tailfill.run-id" in props and SUMMARY_MERGED in props:
            counts = MergeCounts(**{n: int(props.get(f"tailfill.{n}", 0)) for n in COUNT_NAMES})
            out[props["tailfill.run-id"]] = out.get(props["tailfill.run-id"], MergeCounts()) + counts
    return out


class StateMerger:
    """Merges changes into one state table; owns the table's key index in this process."""

    def __init__(self, state: Table, fs: pafs.FileSystem, key: Sequence[str], version_by: str | None,
                 pipeline: str, on_truncate: str = "apply"):
        self.state, self.fs, self.key, self.version_by, self.pipeline = state, fs, tuple(key), version_by, pipeline
        self.on_truncate = on_truncate
        self.index = KeyIndex()

    def merge(self, run_id: str, batch_id: int, changes: pa.Table, ranges: Sequence[OffsetRange]) -> MergeCounts:
        """Merge the change rows of ``ranges`` (``changes`` may hold more; only those rows count) into the state,
        skipping what it applied already; returns what the merge did (nothing: all applied)."""
        try:
            for attempt in commit_attempts():
                with attempt:
                    return self._merge_once(run_id, batch_id, changes, list(ranges))
        except CommitFailedException:
            raise CommitConflictError(f"the merge of batch {batch_id} (run {run_id}) into {self.state.name()} kept "
                                      f"conflicting after {COMMIT_ATTEMPTS} attempts") from None
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _merge_once(self, run_id: str, batch_id: int, changes: pa.Table, ranges: list[OffsetRange]) -> MergeCounts:
        with paused_gc():  # else the merge's allocations (plan, segment, pyiceberg's commit) make it walk the index
            return self._merge_paused(run_id, batch_id, changes, ranges)

    def _merge_paused(self, run_id: str, batch_id: int, changes: pa.Table, ranges: list[OffsetRange]) -> MergeCounts:
        state = self.state
        state.refresh()
        applied = applied_ranges(state)
        todo = subtract(merge(ranges), applied)
        if not todo:
            return MergeCounts()
        rows = _rows_in(changes, todo)
        moved = foreign_rewrite(state)
        if moved is not None:
            raise LakeError(f"the state table {'.'.join(state.name())}'s data files were rewritten by another tool "
                            f"(snapshot {moved.snapshot_id}: {moved.summary['deleted-data-files']} data files "
                            "removed), so its key index points at rows in files that are gone (fix: `tailfill "
                            "maintain` the pipeline: its compaction rebases the key index on the files as they are)")
        data_uri = new_file_uri(state.location(), run_id)  # the merge's data file, if any row wins
        self.index.follow(self.fs, json.loads(state.properties.get(INDEX_PROP, "[]")))
        is_truncate = pc.equal(rows.column(CDC_OP), TRUNCATE_OP).fill_null(False) if rows.num_rows else None
        truncation = self._truncation(rows.filter(is_truncate) if rows.num_rows else rows, truncated_at(state))
        if is_truncate is not None:
            rows = rows.filter(pc.invert(is_truncate))
        plan = self._plan(rows, data_uri, truncation) if rows.num_rows or truncation.new else MergePlan()
        plan.counts += truncation.counts
        segment_uri = deletes = None
        if plan.entries.num_rows:  # every file goes under data/, which a new table lacks
            make_dirs(self.fs, f"{state.location().rstrip('/')}/data")
            segment_uri = new_file_uri(state.location(), f"keyindex-{run_id}")
            pq.write_table(plan.entries, fs_path(segment_uri), filesystem=self.fs)
        if len(plan.upserts):
            pq.write_table(_state_rows(rows.take(plan.upserts), state), fs_path(data_uri), filesystem=self.fs,
                           **PARQUET_OPTIONS)
        if len(plan.delete_files):
            deletes = write_position_deletes(self.fs, new_file_uri(state.location(), f"deletes-{run_id}"),
                                             plan.delete_files, plan.delete_positions)
        failpoints.maybe_fail("before-state-commit")
        failpoints.pause("before-state-commit")
        counts = state_counts(state) + plan.counts
        summary = {"tailfill.pipeline": self.pipeline, "tailfill.run-id": run_id, "tailfill.batch-id": str(batch_id),
                   SUMMARY_MERGED: ranges_to_json(todo), **{f"tailfill.{n}": str(v)
                                                             for n, v in plan.counts.to_dict().items()}}
        with transaction(state) as tx:
            map_by_name(tx)
            delta = RowDelta(tx, summary)
            if len(plan.upserts):
                delta.append_data_file(data_file(state.io, tx.table_metadata, data_uri, Record()))
            if deletes is not None:
                delta.add_delete_file(deletes)
            delta.commit()
            segments = [*self.index.segments, *([segment_uri] if segment_uri else [])]
            tx.set_properties({APPLIED_PROP: ranges_to_json(merge([*applied, *todo])), INDEX_PROP: json.dumps(segments),
                               COUNTS_PROP: json.dumps(counts.to_dict()),
                               LIVE_PROP: str(live_rows(state) + plan.live),
                               **({TRUNCATED_PROP: json.dumps(list(truncation.cut))} if truncation.new else {})})
        if segment_uri is not None:  # into the index only once the commit that makes it true has landed
            self.index.add(plan.entries, segment_uri)
        return plan.counts

    def _truncation(self, truncates: pa.Table, applied: Version | None) -> Truncation:
        """The truncates of a batch (``truncates``: their change rows) against the latest one the state applied:
        the latest of all, whether it is the batch's, and their counts. ``on_truncate: stop`` stops at the first."""
        if truncates.num_rows == 0:
            return Truncation(applied, False)
        first = f"{truncates.column('kafka_topic')[0]}/{truncates.column('kafka_partition')[0]}@" \
                f"{truncates.column('kafka_offset')[0]}"
        if self.on_truncate == "stop":
            raise ChangeStreamError(f"a truncate (op t) at {first}: target.on_truncate is stop; set it to apply to "
                                    "empty the state table as of this change (the change log holds it; the next run "
                                    "applies it), or reset the pipeline and take a new snapshot")
        version = truncates.column(self.version_by or "kafka_offset")
        if version.null_count:
            raise ChangeStreamError(f"the truncate at {first} has no {self.version_by} (target.version_by); what each "
                                    f"connector carries: {ORDERED_BY}")
        at = [Version(v, p, o) for v, p, o in zip(version.to_pylist(), truncates.column("kafka_partition").to_pylist(),
                                                  truncates.column("kafka_offset").to_pylist(), strict=True)]
        latest = max(at)
        if self.version_by is None and len({v.partition for v in at} | ({applied.partition} if applied else set())) > 1:
            raise ChangeStreamError(f"truncates in two partitions of the topic (one at {first}): their order "
                                    f"is unknown; set target.version_by to a column that orders them: {ORDERED_BY}")
        new = applied is None or latest > applied
        return Truncation(latest if new else applied, new,
                          MergeCounts(changes=len(at), truncated=int(new), superseded=len(at) - int(new)))

    def _plan(self, rows: pa.Table, data_uri: str, truncation: Truncation) -> MergePlan:
        """Fold ``rows`` per key by version, and decide each key's last change against the applied version and the
        latest truncate (the winning rows go to ``data_uri``, in the order of :attr:`MergePlan.upserts`; a new
        truncate deletes every live key it is newer than). Array operations over the changed keys: no Python step
        per key but the index's dict lookup."""
        cut = truncation.cut
        if cut is not None and self.version_by is None:
            self._one_partition(rows, cut, truncation.new)
        keys = encode_keys(rows, self.key)
        last = self._last_change(rows, keys)
        changed = list(last)
        at = np.fromiter(last.values(), np.int64, len(last))  # each changed key's winning row
        part, offset = _ints(rows, "kafka_partition")[at], _ints(rows, "kafka_offset")[at]
        version = _ints(rows, self.version_by)[at] if self.version_by else offset
        is_delete = pc.equal(rows.column(CDC_OP), DELETE_OP).fill_null(False).to_numpy()[at]
        now = self.index.lookup(changed)
        if self.version_by is None:
            split = now.known & (now.partition != part)
            if split.any():
                i = int(np.argmax(split))
                self._same_partition(changed[i], int(now.partition[i]), int(part[i]))
        wins = ~now.known | newer(version, part, offset, now.version, now.partition, now.offset)
        if cut is not None:  # a change older than the latest truncate is superseded by it
            wins &= newer(version, part, offset, *cut)
        replaces = wins & now.known & (now.file >= 0)  # the key's live row goes, whatever replaces it
        upsert = wins & ~is_delete
        won = np.flatnonzero(wins)
        upsert_won = upsert[won]
        file = pc.if_else(pa.array(upsert_won), pa.scalar(data_uri), pa.scalar(None, pa.string()))
        entries = segment_of(pa.array(changed, pa.string()).take(pa.array(won)), is_delete[won], part[won],
                             version[won], offset[won], file, np.where(upsert_won, np.cumsum(upsert_won) - 1, -1))
        updated = int(np.count_nonzero(upsert & replaces))
        upserts = int(np.count_nonzero(upsert))
        counts = MergeCounts(changes=len(keys), inserted=upserts - updated, updated=updated,
                             deleted=int(np.count_nonzero(wins & is_delete)),
                             superseded=len(keys) - len(won))
        files, positions = now.file[replaces], now.pos[replaces]
        emptied = 0
        if truncation.new and cut is not None:  # every other live key older than the truncate goes
            gone_keys, gone_files, gone_pos = self.index.live_before(cut, exclude=set(np.array(changed)[won].tolist())
                                                                     if len(won) else set())
            emptied = len(gone_keys)
            files, positions = np.concatenate([files, gone_files]), np.concatenate([positions, gone_pos])
            n = emptied
            entries = pa.concat_tables([entries, segment_of(
                pa.array(gone_keys, pa.string()), [True] * n, [cut.partition] * n, [cut.version] * n,
                [cut.offset] * n, pa.nulls(n, pa.string()), [-1] * n)])
        return MergePlan(counts, at[upsert], self.index.file_uri(files), positions, entries,
                         upserts - int(np.count_nonzero(replaces)) - emptied)

    def _one_partition(self, rows: pa.Table, cut: Version, new: bool) -> None:
        """Without ``version_by``, a truncate orders only its own partition's changes: a change in another partition,
        or (``new``: the truncate is this batch's) a key the state knows there, stops the merge. (Once applied, no
        key of the index lay elsewhere: later batches' changes are all there is to check.)"""
        parts = pc.unique(rows.column("kafka_partition")).to_pylist() if rows.num_rows else []
        other = next((p for p in [*parts, *(self.index.partitions() if new else [])] if p != cut.partition), None)
        if other is not None:
            raise ChangeStreamError(f"a truncate in partition {cut.partition} (offset {cut.offset}) and changes in "
                                    f"partition {other} of the topic: their order is unknown; set target.version_by "
                                    f"to a column that orders them: {ORDERED_BY}")

    def _last_change(self, rows: pa.Table, keys: list[str]) -> dict[str, int]:
        """Each key's last change by version (its row's index in ``rows``); a key seen in two partitions without
        ``version_by`` stops the merge."""
        order = pa.table({"key": pa.array(keys, pa.string()), "partition": rows.column("kafka_partition"),
                          "offset": rows.column("kafka_offset"), "at": pa.array(range(rows.num_rows), pa.int64()),
                          "version": rows.column(self.version_by or "kafka_offset")})
        if self.version_by:
            unversioned = order.column("version").is_null()
            upserts = pc.and_(unversioned, pc.not_equal(rows.column(CDC_OP), DELETE_OP))
            if pc.any(upserts).as_py():
                i = pc.index(upserts, True).as_py()
                raise ChangeStreamError(f"the change at {rows.column('kafka_topic')[i]}/{order['partition'][i]}@"
                                        f"{order['offset'][i]} (key {keys[i]}) has no {self.version_by} "
                                        f"(target.version_by); what each connector carries: {ORDERED_BY}")
            order = order.filter(pc.invert(unversioned))  # tombstones: their delete carried the version
        else:
            spread = order.group_by("key").aggregate([("partition", "min"), ("partition", "max")])
            split = spread.filter(pc.not_equal(spread["partition_min"], spread["partition_max"]))
            if split.num_rows:
                self._same_partition(split["key"][0].as_py(), split["partition_min"][0].as_py(),
                                     split["partition_max"][0].as_py())
        order = order.sort_by([("version", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
        return dict(zip(order.column("key").to_pylist(), order.column("at").to_pylist(), strict=True))

    def _same_partition(self, key: str, was: int, now: int) -> None:
        if was != now and self.version_by is None:
            raise ChangeStreamError(f"key {key} has changes in partitions {was} and {now} of the topic: their order "
                                    f"is unknown; set target.version_by to a column that orders them: {ORDERED_BY}")

    def catch_up(self, run_id: str, batch_id: int, changes_table: Table) -> MergeCounts:
        """Merge what the change log committed and the state has not applied (a crash between the two commits),
        reading those rows back from the change log."""
        changes_table.refresh()
        self.state.refresh()
        gap = subtract(read_ledger(changes_table).committed, applied_ranges(self.state))
        if not gap:
            return MergeCounts()
        rows = changes_table.scan(row_filter=range_filter(gap)).to_arrow()
        return self.merge(run_id, batch_id, rows, gap)


@dataclass(frozen=True)
class Truncation:
    """The truncates a merge knows: the latest (``cut``: None, none ever), whether this batch brought it (``new``:
    the state is emptied as of it), and the batch's truncates counted (the latest truncated, the rest superseded)."""

    cut: Version | None
    new: bool
    counts: MergeCounts = field(default_factory=MergeCounts)


@dataclass
class MergePlan:
    """A merge decided: the rows that win (by index in the batch), the rows they replace, the index's segment."""

    counts: MergeCounts = field(default_factory=MergeCounts)
    upserts: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    delete_files: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))  # rows to delete: file, pos
    delete_positions: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    entries: pa.Table = field(default_factory=lambda: segment([]))
    live: int = 0  # the change in live rows


def _ints(rows: pa.Table, column: str) -> np.ndarray:
    """An integer column as NumPy (nulls as 0: the rows read from it never hold one)."""
    return rows.column(column).fill_null(0).to_numpy()


def _rows_in(table: pa.Table, ranges: list[OffsetRange]) -> pa.Table:
    """The rows of ``table`` whose offsets lie in ``ranges``, ordered by partition and offset."""
    if table.num_rows == 0:
        return table
    rows = table.filter(in_any(table, ranges))
    return rows.sort_by([("kafka_partition", "ascending"), ("kafka_offset", "ascending")])


def _state_rows(rows: pa.Table, state: Table) -> pa.Table:
    """``rows`` with the state table's columns, in its order (a column the rows lack is null)."""
    schema = state.schema().as_arrow()
    columns = [rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
               for f in schema]
    return pa.Table.from_arrays(columns, schema=pa.schema([f.with_nullable(True) for f in schema]))


@dataclass(frozen=True)
class KeyedCommitter(Committer):
    """A keyed pipeline's commit: the change log with its ledger (as appended), then the same offsets merged into
    the state table. Its first batch first catches the state up with the change log."""

    merger: StateMerger | None = None
    last_merge: dict[str, float] = field(default_factory=dict)  # the latest merge's counts, seconds, CPU seconds

    def commit(self, run_id: str, batch_id: int, prepared: Sequence[PreparedRange]) -> tuple[CommitResult, float]:
        assert self.merger is not None
        started, cpu = time.perf_counter(), time.process_time()
        counts = MergeCounts()
        if not self.last_merge:  # before this batch's commit: only what an earlier run left behind
            counts = self.merger.catch_up(run_id, batch_id, self.tables.data)
        # Read before the commit: it may commit fresh copies of them, and an orphan cleanup delete these.
        files = [f for p in prepared for f in p.data_files]
        try:
            rows = _read(self.fs, files)
        except OSError as exc:
            raise gone_or(exc, self.tables.data, self.fs, files) from exc
        catch_up_s, catch_up_cpu = time.perf_counter() - started, time.process_time() - cpu
        result, seconds = super().commit(run_id, batch_id, prepared)
        failpoints.maybe_fail("before-state-merge")
        started, cpu = time.perf_counter(), time.process_time()
        # Every range of the batch is in the ledger now (committed by this batch, or skipped as committed before):
        # the merge takes them all, and skips what the state applied already.
        counts += self.merger.merge(run_id, batch_id, rows, [p.marker.range for p in prepared])
        merge_s = time.perf_counter() - started + catch_up_s
        merge_cpu = time.process_time() - cpu + catch_up_cpu  # this process's CPU: what other load cannot inflate
        self.last_merge.update(counts.to_dict(), merge_seconds=round(merge_s, 4), merge_cpu_seconds=round(merge_cpu, 4))
        return result, seconds + merge_s

    def merged(self) -> dict[str, int] | None:
        return {n: int(self.last_merge[n]) for n in COUNT_NAMES} if self.last_merge else None


def _read(fs: pafs.FileSystem, files: Sequence[str]) -> pa.Table:
    """The rows of a batch's prepared data files, as one table."""
    tables = [pq.read_table(fs_path(f), filesystem=fs) for f in files]
    if not tables:
        return pa.table({"kafka_partition": pa.array([], pa.int32()), "kafka_offset": pa.array([], pa.int64())})
    return pa.concat_tables(tables, promote_options="permissive")


def foreign_rewrite(state: Table) -> Snapshot | None:
    """The newest snapshot since Tailfill last set the key index (a merge, or its own compaction) that removed data
    files without Tailfill (Spark's ``rewrite_data_files``, say): the index's rows are no longer where it says;
    None when there is none. A snapshot expired since is not seen: rebase the index before expiring."""
    for snap in ancestors_of(state.current_snapshot(), state.metadata):  # newest first
        summary = snap.summary
        if summary is None:
            continue
        if SUMMARY_MERGED in summary.additional_properties or MAINTENANCE_SUMMARY in summary.additional_properties:
            return None
        if int(summary["deleted-data-files"] or 0) > 0:
            return snap
    return None
