"""The proof of a keyed table: its state equals the fold of the change log, and every change is accounted for.

The change log (the data table) is proven offset by offset as in append mode: every offset is a row, a
quarantined row, or recorded as lost. :func:`check_state` adds, for the state table:

- the offsets it applied are committed in the change log, and it does not lag behind the ledger;
- every change it applied is counted once: inserted, updated, deleted, truncated or superseded (the running counts
  the merges committed with the state, compared with the change rows in the applied ranges);
- each key's row in the state is the key's last change by version in the change log (deleted: no row; older than
  the latest truncate: no row), for the keys a run touched (every key, when the run holds a truncate) or,
  table-wide, for every key; a key that differs is named with both versions.

The fold is made a bucket at a time, so its memory follows a bucket, not the table: the change log's applied rows
(encoded key, op, coordinates, version) and the state's rows (encoded key, coordinates) are streamed from their
files and spilled to Arrow IPC files on local disk, each row to its key's bucket (:func:`partition`); then each
bucket is folded (:func:`_fold`) and compared (:func:`_compare`) alone. There are as many buckets as it takes to
hold at most about :data:`BUCKET_ROWS` rows of either table in one; a smaller table is a single bucket.
"""

from __future__ import annotations

import heapq
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow
from pyiceberg.table import FileScanTask, Table

from tailfill.lake.files import in_any, range_filter
from tailfill.lake.key_index import Version, key_array
from tailfill.lake.keyed import COUNT_NAMES, MergeCounts, applied_ranges, merges_by_run, state_counts
from tailfill.lake.ledger import read_ledger
from tailfill.offsets import OffsetRange, intersect_all, merge, subtract, total
from tailfill.plumbing.disk import naming_full_disk
from tailfill.values.schema import CDC_OP, COORDINATES, DELETE_OP, TRUNCATE_OP

NAMED = 10  # differing keys named in full; the rest are counted
BUCKET_ROWS = 1_000_000  # rows of a table in one bucket, at most about: the fold holds one bucket in memory
PLACE = ("kafka_partition", "kafka_offset")  # a change's place in the change log (a state row: its change's)
KEY = "__tailfill_key"  # in a bucket file: the row's encoded key,
ROW = "__tailfill_row"  # the row's place in its table's scan,
MINE = "__tailfill_mine"  # and (a run's check) whether the change lies in the run's ranges


@dataclass
class StateCheck:
    """What the state check found: keys compared, keys that differ (named), the merge counts, problems."""

    keys_checked: int = 0
    live_rows: int = 0
    differing: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # every merge of the table
    run_counts: dict[str, int] = field(default_factory=dict)  # the merges of the runs validated
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"keys_checked": self.keys_checked, "live_rows": self.live_rows, "differing": self.differing,
                "counts": self.counts, "run_counts": self.run_counts}


def check_state(changes: Table, state: Table, key: Sequence[str], version_by: str | None,
                within: Sequence[OffsetRange] | None = None, runs: Sequence[str] = ()) -> StateCheck:
    """Check ``state`` against the fold of ``changes``: table-wide, or (``within``: a run's ranges) for the keys
    whose changes lie there; ``runs``: the runs whose merges are counted apart.

    A run's check reads both tables whole too (a key's fold takes all its changes, wherever they lie), into the
    same buckets: its change rows are marked (:data:`MINE`) and each bucket compares only the keys marked, so its
    memory is bounded as the table-wide check's is."""
    changes.refresh()
    state.refresh()
    by_run = merges_by_run(state)
    mine = sum((by_run[r] for r in runs if r in by_run), MergeCounts())
    out = StateCheck(counts=state_counts(state).to_dict(), run_counts=mine.to_dict())
    applied, committed = applied_ranges(state), read_ledger(changes).committed
    if beyond := subtract(applied, committed):
        out.problems.append(f"the state {_name(state)} applied offsets the change log never committed: "
                            f"{', '.join(map(str, beyond[:5]))}")
    if lag := subtract(committed, applied):
        out.problems.append(f"the state {_name(state)} lags the change log by {total(lag):,} offsets "
                            f"({', '.join(map(str, lag[:5]))}); the pipeline's next batch catches it up")
    log = _read(changes, [*key, CDC_OP, *COORDINATES, *([version_by] if version_by else [])], applied)
    ranges = intersect_all(merge(within), applied) if within is not None else None
    found, rows, out.live_rows = _fold_and_compare(log, _read(state, [*key, *PLACE]), key, version_by, ranges)
    counts = out.counts
    if counts.get("changes", 0) != rows:
        out.problems.append(f"the state's merges counted {counts.get('changes', 0):,} changes, the change log holds "
                            f"{rows:,} in the applied offsets")
    outcomes = sum(counts.get(n, 0) for n in COUNT_NAMES[1:])
    if outcomes != counts.get("changes", 0):
        out.problems.append(f"the state's merges counted {counts.get('changes', 0):,} changes but {outcomes:,} "
                            "outcomes (inserted + updated + deleted + truncated + superseded)")
    out.keys_checked, out.differing = found.keys, found.differing
    named = found.named()
    out.problems += named
    if out.differing > len(named):
        out.problems.append(f"... {out.differing - len(named):,} more keys differ")
    return out


def _fold_and_compare(log: _Scan, held: _Scan, key: Sequence[str], version_by: str | None,
                      ranges: Sequence[OffsetRange] | None) -> tuple[_Found, int, int]:
    """The change rows ``log`` folded and compared with the state rows ``held``, bucket by bucket, for every key or
    (``ranges`` given) the keys with a change there. Returns what differs, the change rows and the state rows."""
    buckets = max(1, -(-max(log.rows, held.rows) // BUCKET_ROWS))
    found = _Found()
    truncates = _Truncates(version_by, ranges)
    with tempfile.TemporaryDirectory(prefix="tailfill-validate-") as folder:
        logged, changes = partition(_keyed(truncates.taken_from(log), key,
                                           [CDC_OP, *PLACE, *([version_by] if version_by else [])], ranges),
                                    buckets, Path(folder, "changes"))
        kept, live = partition(_keyed(held, key, PLACE), buckets, Path(folder, "state"))
        for log_file, state_file in zip(logged, kept, strict=True):
            rows = _load(log_file)
            touched = None if ranges is None or truncates.mine else set(
                rows.filter(rows.column(MINE)).column(KEY).to_pylist())
            _compare(_fold(rows, version_by, truncates.latest), _load(state_file), touched, found)
    return found, changes + truncates.count, live


class _Truncates:
    """The truncates (op ``t``, rows without a key) taken out of the change rows as they stream by: how many, the
    latest by version, and whether one lies in the run's ``ranges`` (then the run's check takes every key)."""

    def __init__(self, version_by: str | None, ranges: Sequence[OffsetRange] | None):
        self.version_by, self.ranges = version_by, ranges
        self.count, self.latest, self.mine = 0, None, False

    def taken_from(self, scan: _Scan) -> _Scan:
        """``scan`` without its truncates, noting them as its batches are read."""
        def batches() -> Iterator[pa.RecordBatch]:
            for batch in scan.batches:
                truncate = pc.equal(batch.column(CDC_OP), TRUNCATE_OP).fill_null(False)
                if pc.any(truncate).as_py():
                    self._note(pa.Table.from_batches([batch.filter(truncate)]))
                    batch = batch.filter(pc.invert(truncate))
                yield batch

        return _Scan(batches(), scan.schema, scan.rows)

    def _note(self, rows: pa.Table) -> None:
        self.count += rows.num_rows
        offsets = rows.column("kafka_offset").to_pylist()
        versions = rows.column(self.version_by).to_pylist() if self.version_by else offsets
        for v, p, o in zip(versions, rows.column("kafka_partition").to_pylist(), offsets, strict=True):
            if v is not None and (self.latest is None or Version(v, p, o) > self.latest):
                self.latest = Version(v, p, o)
        self.mine |= self.ranges is not None and bool(pc.any(in_any(rows, self.ranges)).as_py())


class _Scan(NamedTuple):
    """A scan's rows as batches, their Arrow schema, and how many rows its files hold (at least the rows given)."""

    batches: Iterator[pa.RecordBatch]
    schema: pa.Schema
    rows: int


def _read(table: Table, columns: Sequence[str], windows: Sequence[OffsetRange] | None = None) -> _Scan:
    """``columns`` of the rows of ``table`` in ``windows`` (None: every row), read a group of files holding about
    :data:`BUCKET_ROWS` rows at a time (pyiceberg's batch reader hands every file of a scan to its threads at once
    and holds what they read until it is consumed)."""
    scan = table.scan(row_filter=range_filter(windows), selected_fields=tuple(dict.fromkeys(columns)))
    tasks = list(scan.plan_files())
    reader = ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter, scan.case_sensitive)
    return _Scan((batch for group in _groups(tasks) for batch in reader.to_record_batches(group)),
                 schema_to_pyarrow(scan.projection(), include_field_ids=False),
                 sum(t.file.record_count for t in tasks))


def _groups(tasks: Sequence[FileScanTask]) -> Iterator[list[FileScanTask]]:
    """``tasks`` in order, in groups of files holding about :data:`BUCKET_ROWS` rows (a larger file alone)."""
    group: list[FileScanTask] = []
    rows = 0
    for task in tasks:
        if group and rows + task.file.record_count > BUCKET_ROWS:
            yield group
            group, rows = [], 0
        group.append(task)
        rows += task.file.record_count
    if group:
        yield group


def _keyed(scan: _Scan, key: Sequence[str], keep: Sequence[str],
           ranges: Sequence[OffsetRange] | None = None) -> tuple[pa.Schema, Iterator[pa.Table]]:
    """The rows of ``scan`` as bucket files hold them: :data:`KEY` (the encoded key), :data:`ROW` (the row's place
    in the scan), ``keep``, and (``ranges`` given) :data:`MINE` (whether the row lies in ``ranges``)."""
    keep = list(dict.fromkeys(keep))
    schema = pa.schema([(KEY, pa.string()), (ROW, pa.int64()), *((c, scan.schema.field(c).type) for c in keep),
                        *([(MINE, pa.bool_())] if ranges is not None else [])])

    def pieces() -> Iterator[pa.Table]:
        row = 0
        for batch in scan.batches:
            rows = pa.Table.from_batches([batch])
            columns = [key_array(rows, key), pa.array(np.arange(row, row + rows.num_rows)),
                       *(rows.column(c) for c in keep), *([in_any(rows, ranges)] if ranges is not None else [])]
            yield pa.Table.from_arrays(columns, names=schema.names).cast(schema)
            row += rows.num_rows

    return schema, pieces()


def partition(keyed: tuple[pa.Schema, Iterable[pa.Table]], n: int, folder: Path) -> tuple[list[Path], int]:
    """Spill ``keyed`` (a schema and its rows, with :data:`KEY`) into ``n`` Arrow IPC files under ``folder``, each
    row to the bucket of its key (:func:`bucket_of`): every row in one file, all of a key's rows in the same one,
    in their order. Returns the files, bucket by bucket, and the rows spilled."""
    schema, pieces = keyed
    folder.mkdir()
    files = [folder / f"{b}.arrow" for b in range(n)]
    rows = 0
    with naming_full_disk("a bucket file of the fold", str(folder)), ExitStack() as stack:
        writers = [stack.enter_context(pa.ipc.new_file(str(f), schema)) for f in files]
        for piece in pieces:
            rows += piece.num_rows
            for b, part in _split(piece, n):
                writers[b].write_table(part)
    return files, rows


def _split(rows: pa.Table, n: int) -> Iterator[tuple[int, pa.Table]]:
    """``rows`` by bucket: each bucket that holds some, with its rows in their order."""
    if n == 1:
        yield 0, rows
        return
    buckets = bucket_of(rows.column(KEY), n)
    order = np.argsort(buckets, kind="stable")
    bounds = np.searchsorted(buckets[order], np.arange(n + 1))
    rows = rows.take(order)
    for b in np.flatnonzero(np.diff(bounds)):
        yield int(b), rows.slice(bounds[b], bounds[b + 1] - bounds[b])


def bucket_of(keys: pa.Array | pa.ChunkedArray, n: int) -> np.ndarray:
    """Each encoded key's bucket in [0, n): the CRC-32 of its text modulo ``n``, the same in every process."""
    return np.fromiter((zlib.crc32(k.encode()) for k in keys.to_pylist()), np.int64, len(keys)) % n


def _load(file: Path) -> pa.Table:
    """A bucket's rows, mapped from its file."""
    return pa.ipc.open_file(pa.memory_map(str(file))).read_all()


def _fold(rows: pa.Table, version_by: str | None, truncated: Version | None = None) -> dict[str, tuple[int, int]]:
    """Each live key's last change by version, as (partition, offset), of change ``rows`` with their :data:`KEY`; a
    key whose last change is older than the latest truncate (``truncated``) has none."""
    keys = rows.column(KEY).to_pylist()
    parts = rows.column("kafka_partition").to_pylist()
    offsets = rows.column("kafka_offset").to_pylist()
    versions = rows.column(version_by).to_pylist() if version_by else offsets
    ops = rows.column(CDC_OP).to_pylist()
    last: dict[str, int] = {}
    for i, k in enumerate(keys):
        if versions[i] is None:  # (version_by) a tombstone after its delete, which carried the version
            continue
        j = last.get(k)
        if j is None or Version(versions[i], parts[i], offsets[i]) > Version(versions[j], parts[j], offsets[j]):
            last[k] = i
    return {k: (parts[i], offsets[i]) for k, i in last.items() if ops[i] != DELETE_OP and (
        truncated is None or Version(versions[i], parts[i], offsets[i]) > truncated)}


@dataclass
class _Found:
    """What the buckets' comparisons found so far."""

    keys: int = 0
    differing: int = 0
    twice: list[tuple[int, str]] = field(default_factory=list)  # (row in the state, problem): a key with two rows
    first: list[tuple[str, str]] = field(default_factory=list)  # (key, problem): the first differing keys by key

    def named(self) -> list[str]:
        """Every key with two rows in the state, in the state's order, then the first differing keys by key: up to
        :data:`NAMED` in all, unless the keys with two rows are more."""
        twice = [problem for _, problem in sorted(self.twice)]
        return twice + [problem for _, problem in self.first][:max(0, NAMED - len(twice))]


def _compare(expected: dict[str, tuple[int, int]], held: pa.Table, touched: set[str] | None, found: _Found) -> None:
    """Compare a bucket's state rows ``held`` (:data:`KEY`, :data:`ROW`, coordinates) with ``expected``, the fold of
    its change rows, for every key or (``touched``) those keys only; add what differs to ``found``."""
    seen: dict[str, tuple[int, int]] = {}
    for k, row, p, o in zip(held.column(KEY).to_pylist(), held.column(ROW).to_pylist(),
                            held.column("kafka_partition").to_pylist(), held.column("kafka_offset").to_pylist(),
                            strict=True):
        if touched is not None and k not in touched:
            continue
        if k in seen:
            found.differing += 1
            found.twice.append((row, f"key {k}: two rows in the state (partition/offset {seen[k]} and {(p, o)})"))
        seen[k] = (p, o)
    keys = set(expected) | set(seen) if touched is None else touched
    found.keys += len(keys)
    differ = [k for k in keys if expected.get(k) != seen.get(k)]
    found.differing += len(differ)
    found.first = heapq.nsmallest(NAMED, found.first + [
        (k, f"key {k}: the state holds {_where(seen.get(k))}, the fold of the change log gives "
            f"{_where(expected.get(k))}") for k in heapq.nsmallest(NAMED, differ)])


def _where(at: tuple[int, int] | None) -> str:
    return "no row (deleted)" if at is None else f"the change at partition {at[0]} offset {at[1]}"


def _name(table: Table) -> str:
    return ".".join(table.name())
