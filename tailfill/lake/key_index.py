"""The key index of a keyed state table: each key's applied version, where its live row is, or that it is deleted.

The merge asks it what the state holds now for a batch's changed keys at once, at a cost per changed key
(not per table row: min/max pruning does not help when updates spread over the key space). It is where
ordering lives: a change wins only if its version is newer than the key's applied one, and a deleted key
keeps its version as a tombstone, so an older change committed later (a backfill after the tail) cannot
bring it back. Tombstones are never purged.

The index is persisted as immutable Parquet segments, one per merge, whose list is a property of the state
table set in the same catalog commit as the merge's rows and deletes: the index is exactly as committed as the
data. A process loads it from the segments once and then applies only the segments other writers added.
"""

from __future__ import annotations

import gc
import itertools
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date, datetime
from decimal import Decimal
from typing import NamedTuple

import numpy as np
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


Place = np.ndarray | int  # a version, partition or offset: of many changes (an array) or one


def newer(version: Place, partition: Place, offset: Place, than_version: Place, than_partition: Place,
          than_offset: Place) -> np.ndarray:
    """Whether (version, partition, offset) is newer than the other, element-wise (NumPy arrays or numbers)."""
    return (version > than_version) | ((version == than_version) & (
        (partition > than_partition) | ((partition == than_partition) & (offset > than_offset))))


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
    """Every key's :class:`Applied`, loaded from a state table's committed segments.

    Columnar: a dict gives each key a slot, and NumPy arrays hold each slot's version, partition, offset, file
    (an id into :attr:`files`; -1: deleted) and position, so a merge asks and updates it for a whole batch of
    keys at a cost of C loops, not of a Python object per key.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.slots: dict[str, int] = {}
        self.segments: list[str] = []
        self.files: list[str] = []
        self._file_ids: dict[str, int] = {}
        self._columns = _Columns(1024)  # never empty: a lookup reads slot 0 for unknown keys

    def __len__(self) -> int:
        return len(self.slots)

    def get(self, key: str) -> Applied | None:
        """What the state holds for ``key`` (None: a key it never saw)."""
        slot = self.slots.get(key)
        return None if slot is None else self._applied(slot)

    def items(self) -> Iterator[tuple[str, Applied]]:
        """Every key and what the state holds for it."""
        for key, slot in self.slots.items():
            yield key, self._applied(slot)

    def live(self) -> int:
        """How many keys have a live row."""
        return int(np.count_nonzero(self._columns.file[:len(self.slots)] >= 0))

    def partitions(self) -> list[int]:
        """The partitions the known keys' last changes lie in."""
        return np.unique(self._columns.partition[:len(self.slots)]).tolist()

    def live_before(self, cut: Version, exclude: set[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The live keys whose applied version is older than ``cut`` (but those in ``exclude``): the keys, their rows'
        file ids and positions. A truncate's cost: one pass over the index's arrays."""
        n, c = len(self.slots), self._columns
        older = newer(cut.version, cut.partition, cut.offset, c.version[:n], c.partition[:n], c.offset[:n])
        slots = np.flatnonzero(older & (c.file[:n] >= 0))
        names = list(self.slots)  # a key's slot is its place in the dict: slots are given in insertion order
        keep = [i for i in slots.tolist() if names[i] not in exclude]
        at = np.array(keep, np.int64)
        return [names[i] for i in keep], c.file[at], c.pos[at]

    def lookup(self, keys: Sequence[str]) -> Lookup:
        """What the state holds for each of ``keys``, as arrays (``known`` False: never seen; its other values
        are meaningless)."""
        slots = np.fromiter(map(self.slots.get, keys, itertools.repeat(-1)), np.int64, len(keys))
        known = slots >= 0
        at = np.where(known, slots, 0)
        c = self._columns
        return Lookup(known, c.version[at], c.partition[at], c.offset[at], c.file[at], c.pos[at])

    def file_uri(self, ids: np.ndarray) -> pa.Array:
        """The data file URIs of file ``ids`` (none -1)."""
        return pa.array(self.files, pa.string()).take(pa.array(ids, pa.int64()))

    def follow(self, fs: pafs.FileSystem, committed: Sequence[str]) -> None:
        """Catch up with the segments the state table lists now (reloading all when its list is not an extension
        of the one applied: the index was rebuilt since)."""
        if list(committed[:len(self.segments)]) != self.segments:
            self._reset()
        for uri in committed[len(self.segments):]:
            self.add(pq.read_table(fs_path(uri), filesystem=fs), uri)

    def add(self, segment: pa.Table, uri: str) -> None:
        """Apply the committed segment at ``uri`` (its rows in order: a later row of a key replaces an earlier)."""
        self.apply(segment)
        self.segments.append(uri)

    def apply(self, segment: pa.Table) -> None:
        """Apply one segment's rows (a later row of a key replaces an earlier)."""
        if segment.num_rows == 0:
            return
        keys = segment.column("key").to_pylist()
        slots = self.slots
        fresh = dict.fromkeys(key for key in keys if key not in slots)  # new keys, each once, in order
        slots.update(zip(fresh, range(len(slots), len(slots) + len(fresh)), strict=True))
        self._columns = self._columns.holding(len(slots))
        at = np.fromiter(map(slots.__getitem__, keys), np.int64, len(keys))
        # the last row of each slot: unique over the reversed slots gives each slot's last occurrence
        last = len(at) - 1 - np.unique(at[::-1], return_index=True)[1]
        dead = segment.column("deleted").to_numpy(zero_copy_only=False)[last]
        file = self._file_id_array(segment.column("file"))[last]
        c = self._columns
        rows = at[last]
        c.version[rows] = _numpy(segment, "version")[last]
        c.partition[rows] = _numpy(segment, "partition")[last]
        c.offset[rows] = _numpy(segment, "offset")[last]
        c.file[rows] = np.where(dead, -1, file)
        c.pos[rows] = _numpy(segment, "pos")[last]

    def _file_id_array(self, files: pa.ChunkedArray) -> np.ndarray:
        """Each row's file id (-1 where null), registering files not seen before."""
        encoded = pc.dictionary_encode(files.combine_chunks() if isinstance(files, pa.ChunkedArray) else files)
        ids = np.array([self._file_id(uri) for uri in encoded.dictionary.to_pylist()] + [-1], np.int64)
        indices = encoded.indices.fill_null(len(encoded.dictionary)).to_numpy(zero_copy_only=False)
        return ids[indices]

    def _file_id(self, uri: str) -> int:
        if uri not in self._file_ids:
            self._file_ids[uri] = len(self.files)
            self.files.append(uri)
        return self._file_ids[uri]

    def _applied(self, slot: int) -> Applied:
        c = self._columns
        file = int(c.file[slot])
        return Applied(Version(int(c.version[slot]), int(c.partition[slot]), int(c.offset[slot])),
                       None if file < 0 else self.files[file], int(c.pos[slot]))


class Lookup(NamedTuple):
    """What the state holds for a batch of keys, one array entry per key (see :meth:`KeyIndex.lookup`)."""

    known: np.ndarray
    version: np.ndarray
    partition: np.ndarray
    offset: np.ndarray
    file: np.ndarray  # a file id, -1: deleted
    pos: np.ndarray


class _Columns:
    """The index's arrays, by slot, with room to grow (doubled when full: a merge never copies the whole)."""

    def __init__(self, capacity: int) -> None:
        self.version = np.zeros(capacity, np.int64)
        self.partition = np.zeros(capacity, np.int32)
        self.offset = np.zeros(capacity, np.int64)
        self.file = np.full(capacity, -1, np.int64)
        self.pos = np.zeros(capacity, np.int64)

    def holding(self, size: int) -> _Columns:
        """Columns with room for ``size`` slots: these, or a copy twice as large."""
        if size <= len(self.version):
            return self
        grown = _Columns(max(size, 2 * len(self.version)))
        n = len(self.version)
        for name in ("version", "partition", "offset", "file", "pos"):
            getattr(grown, name)[:n] = getattr(self, name)
        return grown


def _numpy(table: pa.Table, column: str) -> np.ndarray:
    return table.column(column).to_numpy()


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
    return segment_of(pa.array(keys, pa.string()), [a.file is None for a in applied], [v.partition for v in at],
                      [v.version for v in at], [v.offset for v in at], pa.array([a.file for a in applied], pa.string()),
                      [a.pos for a in applied])


def segment_of(keys: pa.Array, deleted: object, partition: object, version: object, offset: object, file: pa.Array,
               pos: object) -> pa.Table:
    """A segment from its columns (Arrow arrays, NumPy arrays or lists), one row per key in order."""
    columns = [keys, deleted, partition, version, offset, file, pos]
    return pa.Table.from_arrays([c if isinstance(c, pa.Array | pa.ChunkedArray) else pa.array(c, f.type)
                                 for c, f in zip(columns, SEGMENT_SCHEMA, strict=True)], schema=SEGMENT_SCHEMA)
