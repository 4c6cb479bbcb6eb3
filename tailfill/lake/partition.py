"""The table's partition spec (``target.partition_by``), applied where rows are written.

``partition_by`` lists Iceberg transforms of columns: ``identity(c)``, ``year|month|day|hour(c)``,
``bucket(n, c)``, ``truncate(w, c)``. Executors compute each row's partition values from the config
alone (no catalog), write one file set per partition value, and record the values (and the spec they
follow) in each Parquet file's footer. The driver builds the files' Iceberg entries from that footer:
pyiceberg's ``add_files`` infers partitions from column bounds and refuses ``bucket``, so Tailfill
never relies on it for partitioned tables.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
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
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
    TimestampType,
    TimestamptzType,
)
from pyiceberg.utils.concurrent import ExecutorFactory

from tailfill.errors import LakeError

FOOTER_KEY = b"tailfill.partition"  # JSON {"spec": [...], "values": [...]} in a data file's Parquet footer
_ONE = re.compile(r"^\s*(identity|year|month|day|hour)\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")
_TWO = re.compile(r"^\s*(bucket|truncate)\(\s*(\d+)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")
_TIME = {"year": YearTransform, "month": MonthTransform, "day": DayTransform, "hour": HourTransform}
_MICROS = {"day": 86_400_000_000, "hour": 3_600_000_000}


@dataclass(frozen=True)
class PartitionTerm:
    """One entry of ``partition_by``: a transform of one column."""

    transform: str  # identity, year, month, day, hour, bucket, truncate
    column: str
    width: int | None = None  # buckets or truncation width

    def __str__(self) -> str:
        return f"{self.transform}({self.width}, {self.column})" if self.width else f"{self.transform}({self.column})"

    def iceberg(self) -> Transform:
        """The pyiceberg transform."""
        if self.transform == "bucket":
            return BucketTransform(self.width)
        if self.transform == "truncate":
            return TruncateTransform(self.width)
        return _TIME[self.transform]() if self.transform in _TIME else IdentityTransform()

    def check_type(self, kind: pa.DataType) -> str | None:
        """Why this transform cannot apply to a column of ``kind`` (None: it can)."""
        if self.transform in _TIME and not pa.types.is_timestamp(kind):
            return f"{self.transform}() needs a timestamp column, {self.column} holds {kind}"
        if self.transform in ("bucket", "truncate") and not (
                pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_binary(kind)):
            return f"{self.transform}() needs a string, long or binary column, {self.column} holds {kind}"
        if self.transform == "identity" and pa.types.is_floating(kind):
            return f"identity() of a floating-point column ({self.column}) makes a partition per value"
        return None

    def values(self, column: pa.ChunkedArray | pa.Array) -> pa.Array:
        """The partition values of ``column`` under this term (what Iceberg stores for a file)."""
        arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if self.transform in _MICROS:  # hour/day since the epoch: floor division of the microseconds
            micros = pc.cast(arr, pa.int64())
            step = _MICROS[self.transform]
            quotient = pc.divide(micros, step)
            below = pc.and_(pc.less(micros, 0), pc.not_equal(pc.multiply(quotient, step), micros))
            return pc.cast(pc.if_else(below, pc.subtract(quotient, 1), quotient), pa.int32())
        if pa.types.is_timestamp(arr.type):  # identity/year/month of a timestamp: Iceberg's micros
            arr = pc.cast(arr, pa.int64())
        if self.transform == "identity":
            return arr
        fn = self.iceberg().transform(_iceberg_type(column.type))
        encoded = arr.dictionary_encode()  # transform each distinct value once
        mapped = pa.array([fn(v) for v in encoded.dictionary.to_pylist()])
        return mapped.take(encoded.indices)


def _iceberg_type(kind: pa.DataType) -> PrimitiveType:
    if pa.types.is_timestamp(kind):
        return TimestamptzType() if kind.tz else TimestampType()
    for check, iceberg in ((pa.types.is_string, StringType), (pa.types.is_binary, BinaryType),
                           (pa.types.is_int64, LongType), (pa.types.is_integer, IntegerType)):
        if check(kind):
            return iceberg()
    raise LakeError(f"no partition transform for a column of {kind}")


def parse_term(text: str) -> PartitionTerm:
    """``"bucket(16, user_id)"`` as a :class:`PartitionTerm`; a ValueError names the accepted forms."""
    if m := _ONE.match(text):
        return PartitionTerm(m.group(1), m.group(2))
    if m := _TWO.match(text):
        width = int(m.group(2))
        if width < 1:
            raise ValueError(f"{text!r}: the width must be at least 1")
        return PartitionTerm(m.group(1), m.group(3), width)
    raise ValueError(f"{text!r} is not a partition transform: write identity(col), year(col), month(col), day(col), "
                     "hour(col), bucket(N, col) or truncate(W, col)")


def parse_terms(entries: Sequence[str]) -> list[PartitionTerm]:
    return [parse_term(e) for e in entries]


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


def split(table: pa.Table, terms: Sequence[PartitionTerm]) -> Iterator[tuple[tuple, pa.Table]]:
    """``table``'s rows grouped by partition value: (values, rows) once per distinct value."""
    if not terms or table.num_rows == 0:
        if table.num_rows:
            yield (), table
        return
    keys = pa.table({f"_p{i}": t.values(table[t.column]) for i, t in enumerate(terms)})
    names = keys.column_names
    if keys.num_rows and all(pc.count_distinct(keys[n], mode="all").as_py() == 1 for n in names):
        yield tuple(keys[n][0].as_py() for n in names), table  # the common case: one partition
        return
    for combo in keys.group_by(names).aggregate([]).to_pylist():
        mask = None
        for n in names:
            term = pc.is_null(keys[n]) if combo[n] is None else pc.equal(keys[n], combo[n])
            mask = term if mask is None else pc.and_(mask, term)
        yield tuple(combo[n] for n in names), table.filter(mask)


def footer(terms: Sequence[PartitionTerm], values: tuple) -> dict[bytes, bytes]:
    """The Parquet footer metadata recording a file's partition (empty when unpartitioned)."""
    if not terms:
        return {}
    return {FOOTER_KEY: json.dumps({"spec": [str(t) for t in terms], "values": list(values)}).encode()}


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
