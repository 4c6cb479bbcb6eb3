"""A written data file's Iceberg entry, built on the driver from its Parquet footer.

pyiceberg's ``add_files`` infers partitions from column bounds and refuses ``bucket``, so Tailfill never relies
on it for partitioned tables: the partition is the one the executor recorded in the file's footer
(:func:`tailfill.lake.partition.footer`), checked against the table's spec.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    _check_pyarrow_schema_compatible,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import BucketTransform, TruncateTransform
from pyiceberg.typedef import Record
from pyiceberg.utils.concurrent import ExecutorFactory

from tailfill.errors import LakeError
from tailfill.lake.partition import FOOTER_KEY


def spec_terms(spec: PartitionSpec, schema) -> list[str]:
    """A table's partition spec as ``partition_by`` entries (for comparing it with the config)."""
    out = []
    for f in spec.fields:
        column = schema.find_column_name(f.source_id)
        t = f.transform
        if isinstance(t, BucketTransform):
            out.append(f"bucket({t.num_buckets}, {column})")
        elif isinstance(t, TruncateTransform):
            out.append(f"truncate({t.width}, {column})")
        else:
            out.append(f"{t}({column})")
    return out


def data_file(io: FileIO, metadata: TableMetadata, uri: str, partition: Record | None = None) -> DataFile:
    """The Iceberg entry of data file ``uri`` for ``metadata``'s current spec.

    Its partition is ``partition`` if given, else the one recorded in the file's footer; a file
    written for another spec than the table's (``partition_by`` changed without the table following)
    is refused with the two specs named.
    """
    input_file = io.new_input(uri)
    with input_file.open() as stream:
        parquet = pq.read_metadata(stream)
    schema, spec = metadata.schema(), metadata.spec()
    _check_pyarrow_schema_compatible(schema, parquet.schema.to_arrow_schema(), format_version=metadata.format_version)
    stats = data_file_statistics_from_parquet_metadata(parquet, compute_statistics_plan(schema, metadata.properties),
                                                       parquet_path_to_id_mapping(schema))
    if partition is None:
        partition = _footer_partition(parquet, spec_terms(spec, schema), uri)
    return DataFile.from_args(content=DataFileContent.DATA, file_path=uri, file_format=FileFormat.PARQUET,
                              partition=partition, file_size_in_bytes=len(input_file), sort_order_id=None,
                              spec_id=metadata.default_spec_id, equality_ids=None, key_metadata=None,
                              **stats.to_serialized_dict())


def data_files(io: FileIO, metadata: TableMetadata, uris: Sequence[str]) -> list[DataFile]:
    """:func:`data_file` of each of ``uris``, footers read in parallel (as pyiceberg's ``add_files`` does)."""
    return list(ExecutorFactory.get_or_create().map(lambda uri: data_file(io, metadata, uri), uris))


def _footer_partition(parquet: pq.FileMetaData, expected: list[str], uri: str) -> Record:
    recorded = json.loads((parquet.metadata or {}).get(FOOTER_KEY, b'{"spec": [], "values": []}'))
    if recorded["spec"] != expected:
        raise LakeError(f"data file {uri} was written for partition spec {recorded['spec']} but the table's is "
                        f"{expected}: set target.partition_by to match, or let the next run evolve the table")
    return Record(*recorded["values"])
