"""``target.partition_by`` entries: Iceberg transforms of columns, parsed and checked without pyiceberg.

``identity(c)``, ``year|month|day|hour(c)`` of a timestamp, ``bucket(n, c)`` and ``truncate(w, c)`` of a
string, long or binary. The config validates entries with this module alone (Airflow parses DAG files
without pyiceberg); computing values (:meth:`PartitionTerm.values`) loads pyiceberg's transforms.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from tailfill.errors import LakeError
from tailfill.values.paths import PATH, column_at

if TYPE_CHECKING:
    from pyiceberg.transforms import Transform
    from pyiceberg.types import PrimitiveType

_ONE = re.compile(rf"^\s*(identity|year|month|day|hour)\(\s*({PATH})\s*\)\s*$")
_TWO = re.compile(rf"^\s*(bucket|truncate)\(\s*(\d+)\s*,\s*({PATH})\s*\)\s*$")
TIME_TRANSFORMS = ("year", "month", "day", "hour")
_MICROS = {"day": 86_400_000_000, "hour": 3_600_000_000}


@dataclass(frozen=True)
class PartitionTerm:
    """One entry of ``partition_by``: a transform of one column."""

    transform: str  # identity, year, month, day, hour, bucket, truncate
    column: str
    width: int | None = None  # buckets or truncation width

    def __str__(self) -> str:
        return f"{self.transform}({self.width}, {self.column})" if self.width else f"{self.transform}({self.column})"

    @property
    def field_name(self) -> str | None:
        """The partition field's name for a nested column (``repo_id_bucket_8``); None: Iceberg's default."""
        if "." not in self.column:
            return None
        return "_".join([self.column.replace(".", "_"), self.transform, *([str(self.width)] if self.width else [])])

    def values_in(self, table: pa.Table) -> pa.Array:
        """The partition values of ``table``'s rows (the column may be nested: ``repo.id``)."""
        return self.values(column_at(table, self.column))

    def iceberg(self) -> Transform:
        """The pyiceberg transform."""
        from pyiceberg.transforms import BucketTransform, IdentityTransform, TruncateTransform

        if self.transform == "bucket":
            return BucketTransform(self.width)
        if self.transform == "truncate":
            return TruncateTransform(self.width)
        return _time_transform(self.transform) if self.transform in TIME_TRANSFORMS else IdentityTransform()

    def check_type(self, kind: pa.DataType) -> str | None:
        """Why this transform cannot apply to a column of ``kind`` (None: it can)."""
        if self.transform in TIME_TRANSFORMS and not pa.types.is_timestamp(kind):
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


def _time_transform(name: str) -> Transform:
    from pyiceberg.transforms import DayTransform, HourTransform, MonthTransform, YearTransform

    return {"year": YearTransform, "month": MonthTransform, "day": DayTransform, "hour": HourTransform}[name]()


def _iceberg_type(kind: pa.DataType) -> PrimitiveType:
    from pyiceberg.types import BinaryType, IntegerType, LongType, StringType, TimestampType, TimestamptzType

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
                     "hour(col), bucket(N, col) or truncate(W, col); col is a column or a struct's field (repo.id)")


def parse_terms(entries: Sequence[str]) -> list[PartitionTerm]:
    return [parse_term(e) for e in entries]
