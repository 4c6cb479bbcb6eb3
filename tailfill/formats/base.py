"""The one interface of a format: what a pipeline's ``format.type`` must say and do, and the rows around it.

A :class:`Format` (one per pipeline, made from its ``format`` block) checks that block, says the
columns a new data table gets and the columns the YAML declares, and makes the :class:`Decoder` the
executors use. A decoder turns the raw values (and keys) of a batch into rows of its columns, and
says why each other record cannot be a row. What every format shares is built here, once:
:func:`split_records` puts the Kafka metadata columns before the decoded ones and the raw value
after them, and sends every record that did not decode to the quarantine table with the reason.
``lake/`` knows formats only by this interface; the formats Tailfill has are named in
:mod:`tailfill.formats.registry`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailfill.config import FormatConfig
from tailfill.values.drift import Drift
from tailfill.values.schema import KEY_TYPES, METADATA_FIELDS, QUARANTINE_SCHEMA, VALUE_FIELD

if TYPE_CHECKING:
    from tailfill.formats.schema_registry import RegistryClient

KEY_AT = [f.name for f in METADATA_FIELDS].index("kafka_key")
NOT_UTF8_KEY = "key is not valid UTF-8 (format.key: string)"


@dataclass
class Rows:
    """Records that decoded into one set of columns: their positions in the batch and their columns.

    ``columns`` may start with ``kafka_key``: the key decoded, which replaces the raw key."""

    positions: pa.Array  # int64, ascending
    columns: pa.Table


@dataclass
class Decoded:
    """What a decoder made of a batch: groups of rows, and why each other record is not one (by position).

    A JSON decoder also counts the fields not declared its records hold (``unknown``: dotted path → records,
    position of the first) and says which columns they want the table to add or widen (``wants``: name, type,
    first position)."""

    rows: list[Rows] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)
    unknown: dict[str, tuple[int, int]] = field(default_factory=dict)
    wants: list[tuple[str, str, int]] = field(default_factory=list)


class Decoder(Protocol):
    """Decodes the values (and keys) of raw records, on an executor; built once per Python worker."""

    key: str  # format.key: "raw" (bytes as sent), "string" (UTF-8), "registry" (decoded by the decoder)
    rows_schema: pa.Schema | None  # every row's columns (metadata, decoded, raw value); None: each writer's own

    def decode(self, values: pa.Array, keys: pa.Array, table_columns: pa.Schema | None) -> Decoded:
        """Rows and errors of ``values`` (binary); ``table_columns``: the data table's columns now (a format
        whose rows follow their writer schema checks them against it), or None."""
        ...


@dataclass(frozen=True)
class NewTable:
    """What a format says of a new data table: its key's type, its columns, more table properties."""

    key_type: pa.DataType
    columns: pa.Schema
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def schema(self) -> pa.Schema:
        """The whole table: the Kafka metadata (the key as decoded), the format's columns, the raw value."""
        meta = [pa.field("kafka_key", self.key_type) if f.name == "kafka_key" else f for f in METADATA_FIELDS]
        return pa.schema([*meta, *self.columns, VALUE_FIELD])


class Format(ABC):
    """One pipeline's format (``format.type``), made from its ``format`` block on the driver or an executor.

    ``registry``: the Schema Registry's client, for a format that reads writer schemas from one.
    """

    name: ClassVar[str]
    # Rows carry the columns of each record's writer schema: files follow them, and the table takes their new
    # columns before a batch commits. Otherwise every row has the columns the YAML declares.
    follows_writer_schema: ClassVar[bool] = False

    def __init__(self, fmt: FormatConfig, topic: str, registry: RegistryClient | None = None):
        self.fmt, self.topic, self.registry = fmt, topic, registry

    @classmethod
    @abstractmethod
    def problems(cls, fmt: FormatConfig) -> list[str]:
        """What is wrong with a ``format`` block of this type, one line each (none: it is fine)."""

    @classmethod
    def declared_columns(cls, fmt: FormatConfig) -> pa.Schema | None:
        """The data table's whole schema as the YAML declares it; None when the columns are known only when the
        table is made (a registry's schema)."""
        return None

    @abstractmethod
    def new_table(self) -> NewTable:
        """The key type, columns and properties of a new data table (on the driver, by the planner)."""

    @abstractmethod
    def decoder(self) -> Decoder:
        """The decoder of this format, for an executor (built once per worker)."""


def split_records(batch: pa.RecordBatch | pa.Table, decoder: Decoder, run_id: str,
                  table_columns: pa.Schema | None = None, drift: Drift | None = None) -> tuple[pa.Table, pa.Table]:
    """Raw records (``kafka_*`` columns) as (rows, quarantined rows): each record lands in exactly one. A
    quarantined record keeps its raw key and value, beside the reason; a record the source flagged
    (``source_error``: its timestamp out of range) is quarantined with that reason, whatever its value decodes to.
    ``drift``: where the fields not declared that the records hold are counted, by ``partition:offset``."""
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    meta = table.select([f.name for f in METADATA_FIELDS]).cast(pa.schema(METADATA_FIELDS))
    values = table.column("kafka_value").combine_chunks().cast(pa.binary())
    keys = meta.column("kafka_key").combine_chunks()
    decoded = decoder.decode(values, keys, table_columns)
    if drift is not None and (decoded.unknown or decoded.wants):
        count_drift(drift, decoded, meta)
    if "source_error" in table.column_names and table.column("source_error").null_count < table.num_rows:
        _flagged_by_source(decoded, table.column("source_error").combine_chunks())
    row_meta = meta
    if decoder.key == "string":
        row_meta = _keys_as_text(meta, keys, decoded)
    parts = [_rows(row_meta, values, r, decoder.key) for r in decoded.rows if len(r.positions)]
    ok = (pa.concat_tables(parts, promote_options="permissive") if parts
          else (decoder.rows_schema or _bare(decoder.key)).empty_table())
    errors = decoded.errors
    bad_at = pa.array(sorted(errors), pa.int64())
    bad = pa.Table.from_arrays(
        [*meta.take(bad_at).columns, values.take(bad_at), pa.array([errors[i] for i in sorted(errors)], pa.string()),
         pa.array([run_id] * len(errors), pa.string())], schema=QUARANTINE_SCHEMA)
    return ok, bad


def count_drift(drift: Drift, decoded: Decoded, meta: pa.Table) -> None:
    """Count what ``decoded`` says of fields not declared into ``drift``, positions as ``(partition, offset)``."""
    partitions, offsets = meta.column("kafka_partition"), meta.column("kafka_offset")

    def at(i: int) -> tuple[int, int]:
        return partitions[i].as_py(), offsets[i].as_py()

    for path, (records, first) in decoded.unknown.items():
        drift.seen(path, at(first), records)
    for name, kind, i in decoded.wants:
        drift.want(name, kind, at(i))


def _bare(key: str) -> pa.Schema:
    """The rows of a batch that kept none: metadata (a decoded key has no column then) and the raw value."""
    return pa.schema([f for f in (*METADATA_FIELDS, VALUE_FIELD) if key != "registry" or f.name != "kafka_key"])


def _rows(meta: pa.Table, values: pa.Array, rows: Rows, key: str) -> pa.Table:
    """One group's rows: its records' metadata (their key as decoded, if it was), its columns, the raw value.

    Keys a decoder decodes (``format.key: registry``) are never kept raw: a group of records without keys has
    no ``kafka_key`` column, which reads as null beside the groups that have one."""
    coordinates = meta.take(rows.positions)
    columns = rows.columns
    if columns.num_columns and columns.schema.names[0] == "kafka_key":
        coordinates = coordinates.set_column(KEY_AT, columns.schema.field(0), columns.column(0))
        columns = columns.drop_columns(["kafka_key"])
    elif key == "registry":
        coordinates = coordinates.drop_columns(["kafka_key"])
    return pa.Table.from_arrays([*coordinates.columns, *columns.columns, values.take(rows.positions)],
                                schema=pa.schema([*coordinates.schema, *columns.schema, VALUE_FIELD]))


def _keys_as_text(meta: pa.Table, keys: pa.Array, decoded: Decoded) -> pa.Table:
    """``format.key: string``: the metadata with the key as UTF-8 text; a record whose key is not UTF-8 leaves its
    rows for the quarantine (its value's own error, if any, is the reason given)."""
    ok = valid_utf8(keys)
    if not ok.all():
        for i in np.flatnonzero(~ok).tolist():
            decoded.errors.setdefault(i, NOT_UTF8_KEY)
        decoded.rows = [_without(r, ~ok) for r in decoded.rows]
        keys = pc.if_else(pa.array(ok), keys, pa.nulls(len(keys), pa.binary()))
    return meta.set_column(KEY_AT, pa.field("kafka_key", KEY_TYPES["string"]), keys.cast(KEY_TYPES["string"]))


def _flagged_by_source(decoded: Decoded, source_errors: pa.Array) -> None:
    """Each record the source flagged leaves its rows for the quarantine, with the source's reason."""
    flagged = source_errors.is_valid().to_numpy(zero_copy_only=False)
    for i in np.flatnonzero(flagged).tolist():
        decoded.errors[i] = source_errors[i].as_py()
    decoded.rows = [_without(r, flagged) for r in decoded.rows]


def _without(rows: Rows, dropped: np.ndarray) -> Rows:
    keep = ~dropped[rows.positions.to_numpy()]
    if keep.all():
        return rows
    mask = pa.array(keep)
    return Rows(rows.positions.filter(mask), rows.columns.filter(mask))


def no_columns(rows: int) -> pa.Table:
    """A table of ``rows`` rows and no columns (the decoded part of a format that decodes nothing)."""
    return pa.table({"_": pa.nulls(rows)}).drop_columns(["_"])


def valid_utf8(values: pa.Array) -> np.ndarray:
    """Per value of a binary array: valid UTF-8 (nulls count as valid). One vectorised check when all are."""
    try:
        values.cast(pa.string())
        return np.ones(len(values), dtype=bool)
    except pa.ArrowInvalid:
        return np.array([_decodes(v) for v in values.to_pylist()], dtype=bool)


def _decodes(value: bytes | None) -> bool:
    try:
        value is None or value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
