"""The shapes records take between stages, defined once.

- :data:`RAW_SCHEMA`: what the Kafka source emits — coordinates, key, headers, value, ``range_marker``,
  non-null only on the one :class:`RangeMarker` row a reader appends per range it read, and ``source_error``,
  non-null on a record the source read but cannot hand over whole (its timestamp out of range): why, for the
  quarantine;
- :func:`table_schema`: a row of the target table — coordinates, key, headers, the declared fields, the raw value;
- :data:`QUARANTINE_SCHEMA`: a record that could not become a row — coordinates, raw key, headers, raw value,
  error, run;
- :data:`RANGE_SCHEMA`: an offset range to ingest, as the Kafka source hands it to the writer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from tailfill.offsets import OffsetRange, runs_from_text, runs_to_text, total
from tailfill.values.column_types import parse_type

TIMESTAMP = pa.timestamp("us", tz="UTC")  # TIMESTAMP_MICROS in UTC: what pyiceberg reads as timestamptz
# A record's Kafka headers, in order (a key may repeat; a value may be null).
HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

RAW_SCHEMA = pa.schema(
    [
        ("kafka_topic", pa.string()),
        ("kafka_partition", pa.int32()),
        ("kafka_offset", pa.int64()),
        ("kafka_timestamp", TIMESTAMP),
        ("kafka_key", pa.binary()),
        ("kafka_headers", HEADERS),
        ("kafka_value", pa.binary()),
        ("range_marker", pa.string()),
        ("source_error", pa.string()),
    ]
)
METADATA_FIELDS = [RAW_SCHEMA.field(n) for n in ("kafka_topic", "kafka_partition", "kafka_offset",
                                                  "kafka_timestamp", "kafka_key", "kafka_headers")]
COORDINATES = ("kafka_topic", "kafka_partition", "kafka_offset")
RESERVED_PREFIX = "kafka_"  # the Kafka metadata columns' prefix, which no declared field may take
VALUE_FIELD = RAW_SCHEMA.field("kafka_value")
QUARANTINE_SCHEMA = pa.schema([*METADATA_FIELDS, VALUE_FIELD, pa.field("error", pa.string()),
                               pa.field("run_id", pa.string())])
# What the Kafka source emits with ``output=ranges``: one row per offset range of a micro-batch.
RANGE_SCHEMA = pa.schema([("kafka_topic", pa.string()), ("kafka_partition", pa.int32()),
                          ("start_offset", pa.int64()), ("end_offset", pa.int64())])
# Keyed pipelines' change columns, after the decoded ones: the op (r/c/u: the row is the key's new state; d: the key
# is deleted; t: the table is truncated) and Debezium's source position (null when the records carry none):
# source.ts_ms; Postgres's source.lsn; MySQL's binlog position (source.file's number and source.pos, as one long:
# file number * 2**32 + pos); MySQL's GTID (source.gtid's transaction number).
CDC_OP, CDC_TS_MS, CDC_LSN, CDC_BINLOG, CDC_GTID = "cdc_op", "cdc_ts_ms", "cdc_lsn", "cdc_binlog", "cdc_gtid"
CHANGE_COLUMNS = pa.schema([(CDC_OP, pa.string()), (CDC_TS_MS, pa.int64()), (CDC_LSN, pa.int64()),
                            (CDC_BINLOG, pa.int64()), (CDC_GTID, pa.int64())])
POSITION_COLUMNS = CHANGE_COLUMNS.names[1:]  # what an event's source gives
DELETE_OP, TRUNCATE_OP = "d", "t"
FIELD_TYPES = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_(),
               "timestamp": TIMESTAMP}
_SPARK_TYPES = {pa.string(): "string", pa.int32(): "int", pa.int64(): "long", TIMESTAMP: "timestamp",
                pa.binary(): "binary", HEADERS: "array<struct<key: string, value: binary>>"}
KEY_TYPES = {"raw": pa.binary(), "string": pa.string()}  # ``format.key``: the key as bytes, or decoded UTF-8


class DeclaredField(Protocol):
    """A field of a pipeline's format (``config.FieldSpec``): a name and a type (:mod:`.column_types`)."""

    name: str
    type: str


def table_schema(fields: Iterable[DeclaredField], key: str = "raw") -> pa.Schema:
    """Rows of the target table: Kafka metadata (the key as ``format.key`` says), the declared fields, the raw value."""
    meta = [pa.field("kafka_key", KEY_TYPES[key]) if f.name == "kafka_key" else f for f in METADATA_FIELDS]
    return pa.schema([*meta, *(pa.field(f.name, field_type(f.type)) for f in fields), VALUE_FIELD])


def field_type(text: str) -> pa.DataType:
    """The Arrow type of a declared field type (``long``, ``list<string>``, ``decimal(12, 2)``, ...)."""
    return FIELD_TYPES.get(text) or parse_type(text)


def spark_ddl(schema: pa.Schema) -> str:
    """``schema`` as a Spark DDL string (what a Python data source declares)."""
    return ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in schema)


@dataclass(frozen=True)
class RangeMarker:
    """What a reader actually read of one range: how many records, which offsets had expired (``lost``), and which
    the broker did not deliver (``absent``: passed over between records, or at the range's end), under the
    isolation level it read with (``isolation``: why an absent offset was not delivered). Every offset of the range
    is one of the three: :attr:`unaccounted` is what is not."""

    range: OffsetRange
    records: int
    lost: tuple[OffsetRange, ...] = field(default_factory=tuple)
    absent: tuple[OffsetRange, ...] = field(default_factory=tuple)
    isolation: str = "read_committed"

    @property
    def unaccounted(self) -> int:
        """Offsets of the range neither read, lost nor absent (0 for a reader that accounts for its range)."""
        return self.range.size - self.records - total(self.lost) - total(self.absent)

    def to_json(self) -> str:
        return json.dumps({"start": self.range.start, "end": self.range.end, "records": self.records,
                           "lost": [[r.start, r.end] for r in self.lost],
                           "absent": runs_to_text((r.start, r.end) for r in self.absent), "isolation": self.isolation})

    @classmethod
    def from_row(cls, topic: str, partition: int, text: str) -> RangeMarker:
        """The marker carried by a raw row's ``range_marker`` column."""
        data = json.loads(text)
        rng = OffsetRange(topic, partition, data["start"], data["end"])
        return cls(rng, data["records"], tuple(rng.with_bounds(s, e) for s, e in data["lost"]),
                   tuple(rng.with_bounds(s, e) for s, e in runs_from_text(data.get("absent", ""))),
                   data.get("isolation", "read_committed"))

    def to_batch(self) -> pa.RecordBatch:
        """The marker as a one-row batch of :data:`RAW_SCHEMA`."""
        r = self.range
        return pa.RecordBatch.from_arrays(
            [pa.array([r.topic]), pa.array([r.partition], pa.int32()), pa.array([r.start], pa.int64()),
             pa.nulls(1, TIMESTAMP), pa.nulls(1, pa.binary()), pa.nulls(1, HEADERS), pa.nulls(1, pa.binary()),
             pa.array([self.to_json()]), pa.nulls(1, pa.string())],
            schema=RAW_SCHEMA,
        )
