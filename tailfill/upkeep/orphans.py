"""Orphan cleanup: delete files under a table that nothing references, once they are old enough.

Files of failed or killed attempts (prepared, never committed), manifests and metadata files of
failed commits, and files that only expired snapshots referenced are orphans. A file is deleted
only if no live snapshot, manifest, manifest list or kept metadata file references it AND it is
older than the safety age. The listing is taken *before* the references are read; before it deletes
anything, the cleanup fences the table with its cutoff (:mod:`tailfill.lake.orphan_fence`) and reads
the references again, so a commit landing after that read never references a file it deletes: such a
commit copies each of its files older than the cutoff first. The safety age does not make the cleanup
safe; it keeps batches from paying for copies (and, for a batch slower than it, from being prepared
again). The durable audit record is never a candidate.

A candidate may vanish between the listing and its deletion: a commit deletes metadata files that
fell off the metadata log (``write.metadata.delete-after-commit.enabled``), and another cleanup or
expiry may delete the same orphan. A file already gone is what the cleanup wanted; it is counted as
such, not raised.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pyarrow.fs as pafs
from pyiceberg.table import Table

from tailfill.lake.keyed import INDEX_PROP
from tailfill.lake.orphan_fence import fence
from tailfill.plumbing.warehouse import fs_path

SCANNED_DIRS = ("data", "metadata")


@dataclass(frozen=True)
class OrphanResult:
    """What one cleanup of one table did."""

    table: str
    files_seen: int
    deleted: list[str]
    deleted_bytes: int
    kept_too_young: int
    already_gone: int = 0  # candidates something else deleted between the listing and their deletion

    def to_dict(self) -> dict:
        return {**self.__dict__, "deleted": len(self.deleted)}


def referenced_files(table: Table) -> set[str]:
    """Paths (as :func:`fs_path` gives them) of every file the table's live state references."""
    meta = table.metadata
    refs = {table.metadata_location, *(e.metadata_file for e in meta.metadata_log)}
    refs |= {s.statistics_path for s in meta.statistics} | {s.statistics_path for s in meta.partition_statistics}
    manifests = {}
    for snap in meta.snapshots:
        refs.add(snap.manifest_list)
        for m in snap.manifests(table.io):
            manifests[m.manifest_path] = m
    for path, m in manifests.items():
        refs.add(path)
        refs |= {e.data_file.file_path for e in m.fetch_manifest_entry(table.io, discard_deleted=False)}
    refs |= set(json.loads(table.properties.get(INDEX_PROP, "[]")))  # a keyed state's key index segments
    return {fs_path(r) for r in refs}


def remove_orphans(table: Table, fs: pafs.FileSystem, min_age_seconds: float) -> OrphanResult:
    """Delete the files under ``table`` that nothing references and that are older than the safety age."""
    base = table.location().rstrip("/")
    listed = [i for d in SCANNED_DIRS
              for i in fs.get_file_info(pafs.FileSelector(fs_path(f"{base}/{d}"), recursive=True,
                                                          allow_not_found=True))
              if i.type == pafs.FileType.File]
    cutoff = time.time_ns() - int(min_age_seconds * 1e9)
    table.refresh()  # after listing: anything committed since is referenced, or was too young to list
    refs = referenced_files(table)
    orphans = [i for i in listed if i.path not in refs]
    old = [i for i in orphans if i.mtime_ns is not None and i.mtime_ns < cutoff]
    too_young = len(orphans) - len(old)
    if old:  # a commit landing from here on copies its files older than the cutoff: read the references again
        fence(table, cutoff)
        table.refresh()
        refs = referenced_files(table)
        old = [i for i in old if i.path not in refs]
    deleted, gone = [], 0
    for info in old:
        try:
            fs.delete_file(info.path)
        except FileNotFoundError:  # deleted meanwhile by a commit or another cleanup: the goal is met
            gone += 1
            continue
        deleted.append(info)
    return OrphanResult(".".join(table.name()), len(listed), [i.path for i in deleted],
                        sum(i.size or 0 for i in deleted), too_young, gone)
