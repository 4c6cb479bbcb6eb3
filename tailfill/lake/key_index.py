"""The key index of a keyed state table: each key's applied version, where its live row is, or that it is deleted.

The merge asks it, per changed key, what the state holds now, at a cost per changed key (not per table row:
min/max pruning does not help when updates spread over the key space). It is where ordering lives: a change
wins only if its version is newer than the key's applied one, and a deleted key keeps its version as a
tombstone, so an older change committed later (a backfill after the tail) cannot bring it back. Tombstones
are never purged.

The index is persisted as immutable Parquet segments, one per merge, whose list is a property of the state
table set in the same catalog commit as the merge's rows and deletes: the index is exactly as committed as the
data. A process loads it from the segments once and then applies only the segments other writers added.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date, datetime
from decimal import Decimal
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from tailfill.plumbing.warehouse import fs_path

SEGMENT_SCHEMA = pa.schema([
    ("key", pa.string()), ("deleted", pa.bool_()), ("partition", pa.int32()), ("version", pa.int64()),
    ("offset", pa.int64()), ("file", pa.string()), ("pos", pa.int64()),
])


class Version(NamedTuple):
    """A change's place in its key's history: ``version_by``'s value (else its offset), then partition, offset."""

    version: int
    partition: int
    offset: int


class Applied(NamedTuple):
    """What the state holds for a key: the version applied, and its live row (``file`` None: deleted)."""

    at: Version
    file: str | None
    pos: int


def encode_key(values: Sequence[object]) -> str:
    """A key's canonical text (the index's and the proof's identity of a row): its columns' values as JSON."""
    return json.dumps([_plain(v) for v in values], separators=(",", ":"))


def _plain(value: object) -> object:
    if isinstance(value, datetime | date | Decimal):
        return value.isoformat() if not isinstance(value, Decimal) else str(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


def encode_keys(table: pa.Table, columns: Sequence[str]) -> list[str]:
    """The canonical text of each row's key (``columns`` of ``table``), as :func:`encode_key` gives it."""
    if _integer_keys(table, columns):
        return key_array(table, columns).to_pylist()
    values = [table.column(c).to_pylist() for c in columns]
    return [encode_key(v) for v in zip(*values, strict=True)]


def key_array(table: pa.Table, columns: Sequence[str]) -> pa.ChunkedArray | pa.Array:
    """:func:`encode_keys` as Arrow strings (for integer keys built by Arrow, without a Python string per row)."""
    if not _integer_keys(table, columns):
        return pa.array(encode_keys(table, columns), pa.string())
    joined = pc.binary_join_element_wise(*(pc.cast(table.column(c), pa.string()) for c in columns), ",")
    return pc.binary_join_element_wise("[", joined, "]", "")


def _integer_keys(table: pa.Table, columns: Sequence[str]) -> bool:
    """Whether every key column is an integer without nulls: then Arrow builds the same text as JSON."""
    return all(pa.types.is_integer(table.schema.field(c).type) for c in columns) and not any(
        table.column(c).null_count for c in columns)


class KeyIndex:
    """Every key's :class:`Applied`, loaded from a state table's committed segments."""

    def __init__(self) -> None:
        self.keys: dict[str, Applied] = {}
        self.segments: list[str] = []

    def get(self, key: str) -> Applied | None:
        return self.keys.get(key)

    def live(self) -> int:
        """How many keys have a live row."""
        return sum(1 for a in self.keys.values() if a.file is not None)

    def follow(self, fs: pafs.FileSystem, committed: Sequence[str]) -> None:
        """Catch up with the segments the state table lists now (reloading all when its list is not an extension
        of the one applied: the index was rebuilt since)."""
        if list(committed[:len(self.segments)]) != self.segments:
            self.keys.clear()
            self.segments = []
        for uri in committed[len(self.segments):]:
            self.apply(pq.read_table(fs_path(uri), filesystem=fs))
            self.segments.append(uri)

    def add(self, entries: Sequence[tuple[str, Applied]], uri: str) -> None:
        """Apply the segment at ``uri`` that a merge of this process wrote from ``entries`` and committed."""
        self.keys.update(entries)
        self.segments.append(uri)

    def apply(self, segment: pa.Table) -> None:
        """Apply one segment (its rows in order: a later row of a key replaces an earlier)."""
        d = segment.to_pydict()
        for key, dead, part, ver, off, file, pos in zip(d["key"], d["deleted"], d["partition"], d["version"],
                                                        d["offset"], d["file"], d["pos"], strict=True):
            self.keys[key] = Applied(Version(ver, part, off), None if dead else file, pos)


@contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector paused: the index holds millions of small objects, and each collection
    would walk them all (it cost more than the merge itself). Its objects hold no cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def segment(entries: Sequence[tuple[str, Applied]]) -> pa.Table:
    """A segment holding ``entries`` (key, what it now is)."""
    keys, applied = zip(*entries, strict=True) if entries else ((), ())
    at = [a.at for a in applied]
    columns = [list(keys), [a.file is None for a in applied], [v.partition for v in at], [v.version for v in at],
               [v.offset for v in at], [a.file for a in applied], [a.pos for a in applied]]
    return pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(columns, SEGMENT_SCHEMA, strict=True)],
                                schema=SEGMENT_SCHEMA)
