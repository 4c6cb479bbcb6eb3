"""Compaction of a keyed state table: its data files with their position deletes applied, rewritten sorted by key.

Merges add one small data file and one position delete file per batch; readers apply the deletes, and
reads slow down as they accumulate. Compaction reads the live rows (deletes applied), writes them
sorted by key into files of the target size, and in one overwrite removes every old data file and adds
the new ones (the old delete files stay in their manifests, referencing files that are gone: they apply
to nothing). Every live key's row moves, so the same transaction replaces the key index with one base
segment: each key's applied version, its new file and position, and every tombstone.

A merge that committed meanwhile makes the overwrite conflict; it is redone from a fresh read. A merge
that computed its positions before the compaction conflicts in turn and is redone by its committer,
whose index reloads from the new base segment.
"""

from __future__ import annotations

import json

import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from tailfill.errors import CommitConflictError, LakeError
from tailfill.lake.data_files import data_file
from tailfill.lake.files import new_file_uri
from tailfill.lake.key_index import KeyIndex, encode_keys, segment
from tailfill.lake.keyed import INDEX_PROP, foreign_rewrite
from tailfill.lake.ledger import COMMIT_ATTEMPTS, MAINTENANCE_SUMMARY, commit_attempts
from tailfill.lake.transaction import transaction
from tailfill.plumbing.warehouse import fs_path
from tailfill.upkeep.compact import CompactionResult, write_rolling


def compact_state(state: Table, fs: pafs.FileSystem, key: tuple[str, ...], target_bytes: int) -> CompactionResult:
    """Rewrite ``state``'s live rows sorted by ``key`` into files of about ``target_bytes``, its deletes gone,
    when it has delete files, more than one small file or files another tool rewrote (:func:`foreign_rewrite`); the
    key index is rebased in the same commit."""
    try:
        for attempt in commit_attempts(on=(CommitFailedException, ValidationException)):
            with attempt:
                return _compact_once(state, fs, key, target_bytes)
    except (CommitFailedException, ValidationException):
        raise CommitConflictError(f"compaction of {state.name()} kept conflicting after {COMMIT_ATTEMPTS} "
                                  "attempts") from None
    raise AssertionError("unreachable: the last attempt returns or raises")


def _compact_once(state: Table, fs: pafs.FileSystem, key: tuple[str, ...], target_bytes: int) -> CompactionResult:
    state.refresh()
    name = ".".join(state.name())
    tasks = list(state.scan().plan_files())
    old = [t.file for t in tasks]
    has_deletes = any(t.delete_files for t in tasks)
    if not has_deletes and sum(1 for f in old if f.file_size_in_bytes < target_bytes) < 2 \
            and foreign_rewrite(state) is None:  # another tool's rewrite: the index is rebased here
        return CompactionResult(name, 0, 0, 0, len(old), sum(f.file_size_in_bytes for f in old))
    index = KeyIndex()
    index.follow(fs, json.loads(state.properties.get(INDEX_PROP, "[]")))
    rows = state.scan().to_arrow().sort_by([(k, "ascending") for k in key])
    if rows.num_rows != index.live():
        raise LakeError(f"cannot compact {name}: it holds {rows.num_rows:,} live rows but its key index "
                        f"{index.live():,}; `tailfill validate --all` names the keys that differ")
    uris = write_rolling(fs, state.location(), rows, target_bytes)
    new_files = [data_file(state.io, state.metadata, uri, Record()) for uri in uris]  # each footer read once
    entries = []
    keys = encode_keys(rows, key)
    at = 0
    for uri, new in zip(uris, new_files, strict=True):
        n = new.record_count
        for pos in range(n):
            applied = index.get(keys[at + pos])
            if applied is None or applied.file is None:
                raise LakeError(f"cannot compact {name}: key {keys[at + pos]} has a row but no live entry in "
                                "the key index")
            entries.append((keys[at + pos], applied._replace(file=uri, pos=pos)))
        at += n
    entries += [(k, a) for k, a in index.items() if a.file is None]  # tombstones carry over
    base = new_file_uri(state.location(), "keyindex-base")
    pq.write_table(segment(entries), fs_path(base), filesystem=fs)
    with transaction(state) as tx:
        with tx.update_snapshot(snapshot_properties={MAINTENANCE_SUMMARY: "compaction"}).overwrite() as overwrite:
            for f in old:
                overwrite.delete_data_file(f)
            for f in new_files:
                overwrite.append_data_file(f)
        tx.set_properties({INDEX_PROP: json.dumps([base])})
    state.refresh()
    return CompactionResult(name, len(old), len(uris), sum(f.file_size_in_bytes for f in old), len(uris),
                            sum(f.file_size_in_bytes for f in new_files))
