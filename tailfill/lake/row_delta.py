"""Merge-on-read for keyed tables: Iceberg v2 position delete files, and the one snapshot that adds them.

pyiceberg 0.12 writes no delete files (its ``delete``/``upsert`` rewrite whole data files), so this module
holds everything Tailfill needs for them, and most of its use of pyiceberg's private API (the rest: the schema
check :mod:`tailfill.lake.partition` imports):

- :func:`write_position_deletes`: a position delete file (``file_path``, ``pos``; the spec's reserved field
  ids; sorted), and :func:`delete_file_entry`, its manifest entry with full (untruncated) ``file_path``
  bounds, so that readers index a file-scoped delete file by path;
- :class:`RowDelta`: one snapshot adding data files *and* delete files (Java's ``BaseRowDelta``), a
  subclass of pyiceberg's ``_FastAppendFiles`` that writes a second manifest of content ``deletes``.

pyiceberg 0.12 is pinned exactly for this; the keyed integration tests read the tables back with pyiceberg and
DuckDB, so an upgrade that breaks it fails loudly. The table must keep ``commit.retry.num-retries=0``:
pyiceberg's own retry would re-base a RowDelta onto a concurrent compaction and leave its deletes pointing at
files that are gone (duplicate keys). Tailfill redoes a conflicting merge from a fresh read instead.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Transaction
from pyiceberg.table.snapshots import Operation, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.typedef import EMPTY_DICT, Record
from pyiceberg.types import LongType, NestedField, StringType

from tailfill.plumbing.warehouse import fs_path

FILE_PATH_ID, POS_ID = 2147483546, 2147483545
# The spec's position delete schema (pos is a long; pyiceberg's POSITIONAL_DELETE_SCHEMA says int).
POS_DELETE_SCHEMA = Schema(NestedField(FILE_PATH_ID, "file_path", StringType(), required=True),
                           NestedField(POS_ID, "pos", LongType(), required=True))
POS_DELETE_ARROW = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
])
FULL_METRICS = {"write.metadata.metrics.default": "full"}


def write_position_deletes(fs: pafs.FileSystem, uri: str, file_paths: pa.Array, positions: np.ndarray) -> DataFile:
    """Write a position delete file at ``uri`` (rows ``positions`` of ``file_paths``); returns its entry."""
    table = pa.table([file_paths, pa.array(positions, pa.int64())], schema=POS_DELETE_ARROW)
    table = table.sort_by([("file_path", "ascending"), ("pos", "ascending")])
    with pq.ParquetWriter(fs_path(uri), POS_DELETE_ARROW, filesystem=fs, compression="zstd") as writer:
        writer.write_table(table)
    with fs.open_input_file(fs_path(uri)) as f:
        footer, size = pq.read_metadata(f), f.size()
    return delete_file_entry(uri, footer, size)


def delete_file_entry(uri: str, footer: pq.FileMetaData, size: int) -> DataFile:
    """The manifest entry of a position delete file (unpartitioned: spec 0)."""
    stats = data_file_statistics_from_parquet_metadata(
        footer, compute_statistics_plan(POS_DELETE_SCHEMA, FULL_METRICS), parquet_path_to_id_mapping(POS_DELETE_SCHEMA))
    return DataFile.from_args(content=DataFileContent.POSITION_DELETES, file_path=uri, file_format=FileFormat.PARQUET,
                              partition=Record(), file_size_in_bytes=size, sort_order_id=None, spec_id=0,
                              equality_ids=None, key_metadata=None, **stats.to_serialized_dict())


class _DeleteManifestWriterV2(ManifestWriterV2):
    """pyiceberg 0.12's v2 manifest writer, for a manifest of content ``deletes`` (its own hard-codes data)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class RowDelta(_FastAppendFiles):
    """A snapshot that adds data files and position delete files: operation ``overwrite`` (``delete`` when it
    adds only deletes, ``append`` when only data). Existing manifests are kept as they are."""

    def __init__(self, transaction: Transaction, snapshot_properties: dict[str, str] = EMPTY_DICT) -> None:
        super().__init__(Operation.OVERWRITE, transaction, transaction._table.io,
                         snapshot_properties=snapshot_properties)
        self._added_delete_files: list[DataFile] = []

    def add_delete_file(self, delete_file: DataFile) -> RowDelta:
        self._added_delete_files.append(delete_file)
        return self

    def _manifests(self) -> list[ManifestFile]:
        manifests = super()._manifests()
        if not self._added_delete_files:
            return manifests
        with _DeleteManifestWriterV2(self._transaction.table_metadata.spec(), self.schema(), self.new_manifest_output(),
                                     self._snapshot_id, self._compression) as writer:
            for f in self._added_delete_files:
                writer.add_entry(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED,
                                                         snapshot_id=self._snapshot_id, sequence_number=None,
                                                         file_sequence_number=None, data_file=f))
        return [*manifests, writer.to_manifest_file()]

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        if self._added_delete_files:
            self._operation = Operation.OVERWRITE if self._added_data_files else Operation.DELETE
        else:
            self._operation = Operation.APPEND
        md = self._transaction.table_metadata
        collector = SnapshotSummaryCollector()
        for f in [*self._added_data_files, *self._added_delete_files]:
            collector.add_file(data_file=f, partition_spec=md.spec(), schema=md.schema())
        parent = md.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id is not None else None
        return update_snapshot_summaries(Summary(operation=self._operation, **collector.build(), **snapshot_properties),
                                         parent.summary if parent is not None else None)
