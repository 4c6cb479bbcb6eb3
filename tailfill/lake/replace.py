"""Replace the rows of exact offsets in one table: one overwrite snapshot drops the old, adds the new.

A replay batch has new files for offsets the table already holds. :func:`replace_rows` makes one
Iceberg snapshot (operation ``overwrite``, copy-on-write) that removes every live data file holding
rows of those offsets — a file that also holds other offsets is replaced by a rewrite of its other
rows — and adds the batch's new files. A reader sees the old rows or the new ones, never both.

The offset ledger is not touched (each offset is still committed once), nor the audit chain: the
snapshot's summary records the replay (:data:`REPLAY_RUN`, :data:`REPLAY_BATCH`,
:data:`REPLAYED_RANGES`), not a batch of the ledger, so the proof reads the table as before.
Idempotent by ``(run, batch)``: a table that already has that snapshot commits nothing again; a
conflict with another writer is redone from a fresh read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from tailfill.errors import CommitConflictError, LakeError
from tailfill.lake.data_files import data_file, data_files
from tailfill.lake.files import in_any, range_filter, rewrite_without
from tailfill.lake.ledger import COMMIT_ATTEMPTS, commit_attempts, map_by_name
from tailfill.lake.orphan_fence import renew
from tailfill.lake.transaction import transaction
from tailfill.offsets import OffsetRange, merge, ranges_from_json, ranges_to_json
from tailfill.plumbing.warehouse import fs_path
from tailfill.values.schema import COORDINATES

REPLAY_RUN = "tailfill.replay-run"
REPLAY_BATCH = "tailfill.replay-batch"
REPLAYED_RANGES = "tailfill.replayed-ranges"


@dataclass(frozen=True)
class Replacement:
    """One replay batch's change to one table: the rows of ``ranges`` become the rows of ``files``."""

    pipeline: str
    run_id: str
    batch_id: int
    ranges: list[OffsetRange]
    files: list[str]

    def summary(self) -> dict[str, str]:
        return {"tailfill.pipeline": self.pipeline, REPLAY_RUN: self.run_id, REPLAY_BATCH: str(self.batch_id),
                REPLAYED_RANGES: ranges_to_json(self.ranges)}


def replaced(table: Table, run_id: str, batch_id: int) -> bool:
    """Whether ``table`` (as last refreshed) has the snapshot of replay batch ``batch_id`` of ``run_id``."""
    for snap in table.snapshots():
        props = snap.summary.additional_properties if snap.summary else {}
        if props.get(REPLAY_RUN) == run_id and props.get(REPLAY_BATCH) == str(batch_id):
            return True
    return False


def replayed_ranges(table: Table, run_id: str) -> list[OffsetRange]:
    """The offsets replay run ``run_id`` replaced in ``table`` (as last refreshed), merged; none for another run."""
    found: list[OffsetRange] = []
    for snap in table.snapshots():
        props = snap.summary.additional_properties if snap.summary else {}
        if props.get(REPLAY_RUN) == run_id:
            found += ranges_from_json(props.get(REPLAYED_RANGES))
    return merge(found)


def replace_rows(table: Table, fs: pafs.FileSystem, change: Replacement) -> bool:
    """Commit ``change`` to ``table`` in one snapshot; False when there was nothing to do (the table had it
    already, or holds no rows of its offsets before or after)."""
    try:
        for attempt in commit_attempts(on=(CommitFailedException, ValidationException)):
            with attempt:
                return _replace_once(table, fs, change)
    except (CommitFailedException, ValidationException):
        raise CommitConflictError(f"replay batch {change.batch_id} (run {change.run_id}) on {'.'.join(table.name())} "
                                  f"kept conflicting after {COMMIT_ATTEMPTS} attempts") from None
    raise AssertionError("unreachable: the last attempt returns or raises")


def _replace_once(table: Table, fs: pafs.FileSystem, change: Replacement) -> bool:
    table.refresh()
    if replaced(table, change.run_id, change.batch_id):
        return False
    ranges = merge(change.ranges)
    old, remains = _touched(table, fs, ranges, change.run_id)
    if not old and not change.files:
        return False  # no rows of these offsets here, before or after
    files = renew(table, fs, change.files, change.run_id)  # prepared before this read: a cleanup may take them
    with transaction(table) as tx:
        map_by_name(tx)
        new = [*data_files(table.io, tx.table_metadata, files),
               *(data_file(table.io, tx.table_metadata, uri, f.partition) for uri, f in remains)]
        with tx.update_snapshot(snapshot_properties=change.summary()).overwrite() as overwrite:
            for f in old:
                overwrite.delete_data_file(f)
            for f in new:
                overwrite.append_data_file(f)
    return True


def _touched(table: Table, fs: pafs.FileSystem, ranges: Sequence[OffsetRange],
             prefix: str) -> tuple[list[DataFile], list[tuple[str, DataFile]]]:
    """The live files holding rows of ``ranges``, and the rewrites of their other rows (with the file each
    replaces)."""
    old, remains = [], []
    spec_id = table.metadata.default_spec_id
    for task in table.scan(row_filter=range_filter(ranges)).plan_files():
        f = task.file
        if task.delete_files:
            raise LakeError(f"cannot replay into {'.'.join(table.name())}: data file {f.file_path} has delete files "
                            "(only append-mode tables can be replayed)")
        coords = pq.read_table(fs_path(f.file_path), filesystem=fs, columns=list(COORDINATES))
        inside = pc.sum(in_any(coords, ranges)).as_py() or 0
        if inside == 0:
            continue
        old.append(f)
        if inside < coords.num_rows:
            if f.spec_id != spec_id:
                raise LakeError(f"cannot replay part of data file {f.file_path}: it was written for an older "
                                "partition spec (fix: `tailfill maintain` to compact it first, or replay every "
                                "offset it holds)")
            uri = rewrite_without(fs, f.file_path, list(ranges), table.location(), prefix)
            if uri is not None:
                remains.append((uri, f))
    return old, remains
