"""The orphan cleanup's fence: a cleanup never deletes a file that a commit landing after it references.

A batch's files are written (prepared) some time before its commit. A cleanup lists the files under a
table, reads what the table references, and deletes what is unreferenced and older than its cutoff (now
minus the safety age). A batch whose commit lands after that read, with files older than the cutoff,
would reference files the cleanup deletes; a slow batch on a busy machine, or a short safety age, was
enough.

So a cleanup that is about to delete *fences* first (:func:`fence`): one empty snapshot that records its
cutoff in the table's properties (:data:`CUTOFF_PROP`, only ever raised), and only then reads the
references. A commit planned before the fence conflicts with its snapshot and is tried again from a fresh
read; so every commit landing after the fence sees the cutoff, and :func:`renew` replaces each of its files
that the cleanup may take (older than the cutoff, by the store's own clock, the one the cleanup compares)
with a fresh copy before it commits. Safety does not depend on the safety age nor on how long a batch takes;
a safety age shorter than a batch costs copies, and at worst a batch prepared again
(:class:`~tailfill.errors.PreparedFilesGone`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow.fs as pafs
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from tailfill.errors import CommitConflictError, LakeError, PreparedFilesGone
from tailfill.lake.files import rewrite_without
from tailfill.lake.ledger import COMMIT_ATTEMPTS, MAINTENANCE_SUMMARY, commit_attempts
from tailfill.lake.transaction import transaction
from tailfill.plumbing.warehouse import fs_path

CUTOFF_PROP = "tailfill.orphan-cutoff-ns"  # files older than this (ns since the epoch) may be deleted if unreferenced
FENCE = "orphan-fence"  # the fence snapshot's MAINTENANCE_SUMMARY
RENEW_ROUNDS = 3


def cutoff_ns(table: Table) -> int | None:
    """The highest cutoff any orphan cleanup fenced ``table`` with (None: no cleanup ever deleted from it)."""
    text = table.properties.get(CUTOFF_PROP)
    return int(text) if text else None


def fence(table: Table, cutoff: int) -> None:
    """Make every commit that lands from now on see ``cutoff`` (nanoseconds since the epoch): an empty snapshot
    raising :data:`CUTOFF_PROP` to it (nothing when a cleanup already fenced at or past it)."""
    try:
        for attempt in commit_attempts():
            with attempt:
                table.refresh()
                if (cutoff_ns(table) or 0) >= cutoff:
                    return
                with transaction(table) as tx:
                    with tx.update_snapshot(snapshot_properties={MAINTENANCE_SUMMARY: FENCE}).fast_append():
                        pass  # no file: the snapshot is what makes a commit planned before it conflict
                    tx.set_properties({CUTOFF_PROP: str(cutoff)})
                return
    except CommitFailedException:
        raise CommitConflictError(f"the orphan cleanup could not fence {'.'.join(table.name())} after "
                                  f"{COMMIT_ATTEMPTS} attempts") from None


def outlived(table: Table, fs: pafs.FileSystem, files: Sequence[str]) -> list[str]:
    """Those of ``files`` (not yet committed) that an orphan cleanup of ``table`` may delete: older than its
    fence's cutoff, or gone already."""
    cutoff = cutoff_ns(table)
    if cutoff is None or not files:
        return []
    infos = fs.get_file_info([fs_path(f) for f in files])
    return [f for f, i in zip(files, infos, strict=True)
            if i.type != pafs.FileType.File or i.mtime_ns is None or i.mtime_ns < cutoff]


def renew(table: Table, fs: pafs.FileSystem, files: Sequence[str], prefix: str) -> list[str]:
    """``files`` to commit to ``table``, each one a cleanup may delete (:func:`outlived`) replaced by a fresh copy
    named by ``prefix``; :class:`PreparedFilesGone` if one is gone already. Call it on the table as the commit
    reads it (refreshed), so that the cutoff is the one the commit lands after."""
    files = list(files)
    for _ in range(RENEW_ROUNDS):  # a copy is checked too: a store's times can be coarser than a short safety age
        old = outlived(table, fs, files)
        if not old:
            return files
        taken = set(old)
        files = [f for f in files if f not in taken] + [c for uri in old if (c := _copy(table, fs, uri, prefix))]
    raise LakeError(f"the files of a commit to {'.'.join(table.name())} stay older than its orphan cleanup's "
                    f"cutoff after {RENEW_ROUNDS} fresh copies: the store's file times lag the cleanup's clock; "
                    "give maintenance.orphan_min_age a few seconds at least")


def _copy(table: Table, fs: pafs.FileSystem, uri: str, prefix: str) -> str | None:
    """A fresh copy of ``uri`` under ``table`` (None: it holds no row); :class:`PreparedFilesGone` if it is gone."""
    try:
        return rewrite_without(fs, uri, [], table.location(), prefix)
    except OSError as exc:
        raise gone_or(exc, table, fs, [uri]) from exc


def gone_or(exc: OSError, table: Table, fs: pafs.FileSystem, files: Sequence[str]) -> Exception:
    """What to raise when reading ``files`` (prepared for a commit to ``table``) failed with ``exc``:
    :class:`PreparedFilesGone` naming the first one an orphan cleanup took, else ``exc`` (a full disk, the store
    failing: the commit's own error)."""
    missing = [f for f in files if fs.get_file_info(fs_path(f)).type != pafs.FileType.File]
    if not missing:
        return exc
    return PreparedFilesGone(
        f"{missing[0]} is gone before its commit to {'.'.join(table.name())}: an orphan cleanup took it (it was "
        "older than the cleanup's cutoff); nothing was committed, and the batch is prepared again")
