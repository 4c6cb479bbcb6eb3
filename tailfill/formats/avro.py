"""Avro records (Confluent wire format payloads) decoded with their writer schema, and Avro → Arrow types.

record → struct, array → list, map → map<string, ...>, enum → string, fixed → binary,
decimal → decimal(p, s), date → date, timestamp-millis/micros → timestamp (UTC, µs),
local-timestamp-* → timestamp without zone, uuid → string, a union with null → an optional value.
A Kafka Connect or Debezium logical type named by ``connect.name`` (what Confluent's AvroConverter writes for
Debezium's ``io.debezium.time.MicroTimestamp`` and kin) takes its column type
(:func:`~tailfill.formats.connect_types.registry_type`), and
:meth:`AvroWriter.logicals` names those fields for the values' conversion.
A union of several non-null types has no column type: such a schema is refused with the reason.
A top-level field is *required* when its type is not a union with null and it has no default.
A key schema (``format.key: registry``) may be any Avro type: ``"string"``, ``"long"``, a record.
"""

from __future__ import annotations

import io
import json
import uuid
from typing import Any

import fastavro
import pyarrow as pa

from tailfill.formats.connect_types import registry_type
from tailfill.formats.wire import WireFormat
from tailfill.values.column_types import TIMESTAMP

PRIMITIVE = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
             "double": pa.float64(), "bytes": pa.binary(), "string": pa.string()}



def _arrow(schema: Any, names: dict[str, Any], depth: int = 0) -> pa.DataType:
    if depth > 32:
        raise ValueError("nested more than 32 levels deep (a recursive record has no column type)")
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise ValueError(f"union {json.dumps(schema)[:80]} has several non-null types (no column type)")
        return _arrow(branches[0], names, depth + 1)
    if isinstance(schema, str):
        if schema in PRIMITIVE:
            return PRIMITIVE[schema]
        if schema in names:
            return _arrow(names[schema], names, depth + 1)
        raise ValueError(f"unknown type {schema!r}")
    kind, logical = schema["type"], schema.get("logicalType")
    if logical == "decimal":  # (Avro's own, before Kafka Connect's name for it)
        return pa.decimal128(schema["precision"], schema.get("scale", 0))
    if (connected := registry_type(schema.get("connect.name"), schema.get("connect.parameters", {}))) is not None:
        if kind in ("record", "error"):  # named: a later field may refer to it by its name
            names[schema["name"]] = names[f"{schema.get('namespace', '')}.{schema['name']}".lstrip(".")] = schema
        return connected
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return TIMESTAMP
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return pa.timestamp("us")
    if (logical, kind) in (("time-millis", "int"), ("time-micros", "long")):
        return pa.time64("us")  # Iceberg's time is microseconds
    if logical == "uuid":
        return pa.string()
    if isinstance(kind, dict | list):
        return _arrow(kind, names, depth + 1)
    if kind in PRIMITIVE:
        return PRIMITIVE[kind]
    if kind in ("record", "error"):
        names[schema["name"]] = schema
        if schema.get("namespace"):
            names[f"{schema['namespace']}.{schema['name']}"] = schema
        return pa.struct([pa.field(f["name"], _arrow(f["type"], names, depth + 1)) for f in schema["fields"]])
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    if kind == "array":
        return pa.list_(_arrow(schema["items"], names, depth + 1))
    if kind == "map":
        return pa.map_(pa.string(), _arrow(schema["values"], names, depth + 1))
    raise ValueError(f"unsupported Avro type {kind!r}")


def avro_type(schema: Any) -> pa.DataType:
    """The Arrow type of any Avro schema (parsed JSON: a primitive, a record, ...); ValueError if it has none."""
    return _arrow(schema, {})


def avro_columns(text: str) -> pa.Schema:
    """The columns of a top-level Avro record schema (JSON text); ValueError if it is not one or cannot map."""
    schema = json.loads(text)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError("the top-level Avro schema is not a record")
    return pa.schema(list(avro_type(schema)))


def connect_logicals(text: str, image: str) -> dict[str, tuple[str, dict]]:
    """The Kafka Connect logical types (``connect.name``, ``connect.parameters``) of the fields of the record in the
    top-level record's field ``image`` (a Debezium envelope's ``after``): field → (name, parameters)."""
    schema, names = json.loads(text), {}

    def record(node: Any) -> dict | None:
        if isinstance(node, list):
            return next((r for r in map(record, node) if r is not None), None)
        if isinstance(node, str):
            return names.get(node)
        if isinstance(node, dict) and node.get("type") in ("record", "error"):
            names[node["name"]] = names[f"{node.get('namespace', '')}.{node['name']}".lstrip(".")] = node
            for f in node.get("fields", []):
                record(f["type"])
            return node
        return None

    record(schema)
    fields = {f["name"]: f["type"] for f in schema.get("fields", [])}
    found = record(fields[image]) if image in fields else None
    out = {}
    for f in (found or {}).get("fields", []):
        kind = next((b for b in f["type"] if b != "null"), None) if isinstance(f["type"], list) else f["type"]
        kind = names.get(kind, kind) if isinstance(kind, str) else kind  # a record named before
        if isinstance(kind, dict) and isinstance(kind.get("connect.name"), str):
            out[f["name"]] = (kind["connect.name"], kind.get("connect.parameters") or {})
    return out


def avro_required(text: str) -> tuple[str, ...]:
    """The top-level fields a record of this Avro schema always carries: not a union with null, no default."""
    return tuple(f["name"] for f in json.loads(text).get("fields", [])
                 if "default" not in f and not (isinstance(f["type"], list) and "null" in f["type"]))


class AvroWriter:
    """Decodes payloads written with one Avro schema (parsed once) into rows of :attr:`columns`."""

    def __init__(self, text: str, imports: dict[str, str] | None = None):  # no imports: see WireFormat.build
        self.text = text
        self.columns = avro_columns(text)
        self.required = avro_required(text)
        self.parsed = fastavro.parse_schema(json.loads(text))
        self.uuids = "uuid" in text

    def logicals(self, variant: tuple, image: str) -> dict[str, tuple[str, dict]]:
        """The Kafka Connect logical types of the fields of the record in field ``image`` (see
        :func:`connect_logicals`)."""
        return connect_logicals(self.text, image)

    def columns_of(self, variant: tuple) -> pa.Schema:
        return self.columns

    def required_of(self, variant: tuple) -> tuple[str, ...]:
        return self.required

    def read(self, payload: bytes) -> tuple[tuple, dict]:
        """((), the record as a dict) — one payload (after the schema id) decoded."""
        return (), read_avro(payload, self.parsed, self.uuids)


def read_avro(payload: bytes, parsed: Any, uuids: bool) -> Any:
    """One payload (after the schema id) decoded with a parsed schema; ``uuids``: turn UUIDs into text."""
    buf = io.BytesIO(payload)
    value = fastavro.schemaless_reader(buf, parsed, None)
    if buf.tell() != len(payload):
        raise ValueError(f"{len(payload) - buf.tell()} bytes left over after the record")
    return _uuids_as_text(value) if uuids else value


def _uuids_as_text(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dict):
        return {k: _uuids_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_uuids_as_text(v) for v in value]
    return value


class AvroKey:
    """Keys written with one Avro schema of any type."""

    def __init__(self, text: str, imports: dict[str, str] | None = None):  # no imports: see WireFormat.build
        schema = json.loads(text)
        self.kind = avro_type(schema)
        self.parsed = fastavro.parse_schema(schema)
        self.uuids = "uuid" in text

    def type_of(self, variant: tuple) -> pa.DataType:
        return self.kind

    def read(self, payload: bytes) -> tuple[tuple, object]:
        return (), read_avro(payload, self.parsed, self.uuids)


class AvroFormat(WireFormat):
    """``avro``: Avro records with their writer schemas in the registry."""

    name = "avro"
    schema_type = "AVRO"
    writer_class = AvroWriter
    key_class = AvroKey
