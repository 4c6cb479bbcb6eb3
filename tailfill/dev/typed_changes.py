"""Debezium change events with a column of each logical type, as Debezium's JSON converter encodes them.

:data:`COLUMNS` is a table whose columns hold every Kafka Connect and Debezium logical type Tailfill converts
(dates, times and timestamps in each unit, zoned timestamps, decimals as base64 bytes, as exact numbers and as
strings, variable-scale decimals, JSON, UUIDs, enums). :func:`typed_stream` makes changes of rows of random
values (Python's own ``date``, ``time``, ``datetime``, ``Decimal``), each encoded here from the value by the
connector's rules, with or without the converter's ``schema``/``payload`` wrapper. The values themselves are the
answer a test compares a state table with: nothing here decodes.
"""

from __future__ import annotations

import base64
import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Context, Decimal
from typing import Any

from tailfill.dev.change_stream import Change

EPOCH = datetime(1970, 1, 1)
DAY = date(1970, 1, 1)
WIDE = Context(prec=100)  # the default context keeps 28 digits: these decimals have up to 38


def _micros(value: datetime) -> int:
    return (value - EPOCH) // timedelta(microseconds=1)


def _of_day(value: time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def _unscaled(value: Decimal, scale: int) -> str:
    """A decimal's unscaled value as Kafka Connect's Decimal writes it: big-endian two's complement, base64."""
    unscaled = int(value.scaleb(scale, context=WIDE))
    return base64.b64encode(unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)).decode()


@dataclass(frozen=True)
class TypedColumn:
    """A column: its declared type, the logical type Debezium names, the Connect literal type and parameters the
    schema gives, how to make a value and how the converter writes it."""

    name: str
    type: str
    logical: str | None
    literal: str
    make: Callable[[random.Random], Any]
    encode: Callable[[Any], Any]
    parameters: dict[str, str] | None = None


def _date(rng: random.Random) -> date:
    return date(1, 1, 1) + timedelta(days=rng.randrange(3_652_058))  # 0001-01-01 .. 9999-12-31


def _local(rng: random.Random, step_us: int) -> datetime:
    return datetime(1, 1, 1) + timedelta(microseconds=rng.randrange(315_537_897_600_000_000 // step_us) * step_us)


def _nano_range(rng: random.Random) -> datetime:
    """A time whose nanoseconds since 1970 fit a long (1677 to 2262), as a NanoTimestamp's must."""
    return EPOCH + timedelta(microseconds=rng.randrange(-9_000_000_000_000_000, 9_000_000_000_000_000))


def _time(rng: random.Random, step_us: int) -> time:
    return (datetime.min + timedelta(microseconds=rng.randrange(86_400_000_000 // step_us) * step_us)).time()


def _decimal(rng: random.Random, precision: int, scale: int) -> Decimal:
    return Decimal(rng.randrange(-10**precision + 1, 10**precision)).scaleb(-scale, context=WIDE)


COLUMNS: list[TypedColumn] = [
    TypedColumn("id", "long", None, "int64", lambda rng: 0, lambda v: v),
    TypedColumn("born", "date", "io.debezium.time.Date", "int32", _date, lambda v: (v - DAY).days),
    TypedColumn("opens", "time", "io.debezium.time.Time", "int32", lambda rng: _time(rng, 1000),
                lambda v: _of_day(v) // 1000),
    TypedColumn("alarm", "time", "io.debezium.time.MicroTime", "int64", lambda rng: _time(rng, 1), _of_day),
    TypedColumn("tick", "time", "io.debezium.time.NanoTime", "int64", lambda rng: _time(rng, 1),
                lambda v: _of_day(v) * 1000),
    TypedColumn("created", "timestamp_ntz", "io.debezium.time.Timestamp", "int64", lambda rng: _local(rng, 1000),
                lambda v: _micros(v) // 1000),
    TypedColumn("updated", "timestamp_ntz", "io.debezium.time.MicroTimestamp", "int64", lambda rng: _local(rng, 1),
                _micros),
    TypedColumn("logged", "timestamp_ntz", "io.debezium.time.NanoTimestamp", "int64", _nano_range,
                lambda v: _micros(v) * 1000),
    TypedColumn("posted", "timestamp", "org.apache.kafka.connect.data.Timestamp", "int64",
                lambda rng: _local(rng, 1000).replace(tzinfo=UTC), lambda v: _micros(v.replace(tzinfo=None)) // 1000),
    TypedColumn("seen", "timestamp", "io.debezium.time.ZonedTimestamp", "string",
                lambda rng: _local(rng, 1).replace(tzinfo=UTC),
                lambda v: v.astimezone(UTC).isoformat().replace("+00:00", "Z")),
    TypedColumn("price", "decimal(10, 2)", "org.apache.kafka.connect.data.Decimal", "bytes",
                lambda rng: _decimal(rng, 10, 2), lambda v: _unscaled(v, 2),
                {"scale": "2", "connect.decimal.precision": "10"}),
    TypedColumn("total", "decimal(38, 10)", "org.apache.kafka.connect.data.Decimal", "bytes",
                lambda rng: _decimal(rng, 38, 10), lambda v: _unscaled(v, 10),
                {"scale": "10", "connect.decimal.precision": "38"}),
    TypedColumn("balance", "decimal(38, 10)", None, "string", lambda rng: _decimal(rng, 38, 10),
                lambda v: format(v, "f")),  # decimal.handling.mode: string
    TypedColumn("ratio", "decimal(30, 8)", "io.debezium.data.VariableScaleDecimal", "struct",
                lambda rng: _decimal(rng, 20, rng.randrange(9)),
                lambda v: {"scale": -v.as_tuple().exponent, "value": _unscaled(v, -v.as_tuple().exponent)}),
    TypedColumn("doc", "string", "io.debezium.data.Json", "string",
                lambda rng: json.dumps({"n": rng.randrange(1000)}), lambda v: v),
    TypedColumn("ref", "string", "io.debezium.data.Uuid", "string",
                lambda rng: str(uuid.UUID(int=rng.getrandbits(128))), lambda v: v),
    TypedColumn("mood", "string", "io.debezium.data.Enum", "string", lambda rng: rng.choice(["sad", "ok", "happy"]),
                lambda v: v, {"allowed": "sad,ok,happy"}),
]
NUMERIC = {"total"}  # written as JSON numbers (the JSON converter's decimal.format: NUMERIC), exactly


def fields(declare_logical: bool) -> list[dict]:
    """The pipeline's ``format.fields`` for :data:`COLUMNS`: with each field's logical type (events without the
    wrapper), or without (the wrapper's schema names them)."""
    return [{"name": c.name, "type": c.type, **({"required": True} if c.name == "id" else {}),
             **({"logical": c.logical} if declare_logical and c.logical else {})} for c in COLUMNS]


def _schema_field(c: TypedColumn) -> dict:
    out: dict[str, Any] = {"type": c.literal, "optional": c.name != "id", "field": c.name}
    if c.literal == "struct":
        out["fields"] = [{"type": "int32", "optional": False, "field": "scale"},
                         {"type": "bytes", "optional": False, "field": "value"}]
    if c.logical:
        out.update(name=c.logical, version=1)
    if c.parameters:
        out["parameters"] = c.parameters
    return out


def envelope_schema() -> dict:
    """The JSON converter's schema of the change events (what the wrapper carries)."""
    row = {"type": "struct", "fields": [_schema_field(c) for c in COLUMNS], "optional": True, "name": "typed.Value"}
    return {"type": "struct", "name": "typed.Envelope", "optional": False, "fields": [
        {**row, "field": "before"}, {**row, "field": "after"},
        {"type": "struct", "name": "io.debezium.connector.postgresql.Source", "optional": False, "field": "source",
         "fields": [{"type": "int64", "optional": False, "field": "ts_ms"},
                    {"type": "int64", "optional": True, "field": "lsn"}]},
        {"type": "string", "optional": False, "field": "op"}]}


def row(rng: random.Random, key: int) -> dict[str, Any]:
    """A row of random values (Python's own types) for ``key``."""
    return {c.name: key if c.name == "id" else c.make(rng) for c in COLUMNS}


def encoded(values: dict[str, Any] | None, numeric: set[str] = NUMERIC) -> str | None:
    """A row's image as JSON text, each value as the converter writes it, the decimals of ``numeric`` as exact JSON
    numbers (None: no image)."""
    if values is None:
        return None
    parts = []
    for c in COLUMNS:
        v = values.get(c.name)
        text = "null" if v is None else (format(v, "f") if c.name in numeric else json.dumps(c.encode(v)))
        parts.append(f"{json.dumps(c.name)}: {text}")
    return "{" + ", ".join(parts) + "}"


def event_bytes(op: str, before: dict | None, after: dict | None, lsn: int, wrapped: bool) -> bytes:
    """A change event as the JSON converter writes it (``wrapped``: with its schema)."""
    payload = (f'{{"before": {encoded(before) or "null"}, "after": {encoded(after) or "null"}, '
               f'"source": {{"ts_ms": {1_700_000_000_000 + lsn}, "lsn": {lsn}}}, "op": "{op}"}}')
    return (f'{{"schema": {json.dumps(envelope_schema())}, "payload": {payload}}}' if wrapped else payload).encode()


@dataclass
class TypedStream:
    """Changes of typed rows: the Kafka records, each change's row images (before, after) by offset, and the state
    they leave (id → its row's values)."""

    changes: list[Change]
    images: dict[int, tuple[dict | None, dict | None]]
    state: dict[int, dict]


def typed_stream(events: int, keys: int, seed: int = 3, wrapped: bool = True) -> TypedStream:
    """``events`` changes (creates, updates, deletes with their tombstones) of rows over ``keys`` ids in one
    partition."""
    rng = random.Random(seed)
    state: dict[int, dict] = {}
    images: dict[int, tuple[dict | None, dict | None]] = {}
    out: list[Change] = []
    lsn = 100
    while len(out) < events:
        key = rng.randrange(keys)
        lsn += 1
        where = json.dumps({"id": key}).encode()
        if key in state and rng.random() < 0.2:
            images[len(out)] = (state.pop(key), None)
            out.append(Change(0, len(out), where, event_bytes("d", *images[len(out)], lsn, wrapped), key, "d"))
            out.append(Change(0, len(out), where, None, key, "tombstone"))
            continue
        op = "u" if key in state else "c"
        state[key] = row(rng, key)
        images[len(out)] = (None, state[key])
        out.append(Change(0, len(out), where, event_bytes(op, None, state[key], lsn, wrapped), key, op))
    return TypedStream(out, images, state)


def _avro_type(c: TypedColumn) -> object:
    """A column's Avro type as Confluent's AvroConverter writes Debezium's schema (``connect.name`` on the literal)."""
    literal = {"int32": "int", "int64": "long", "string": "string", "bytes": "bytes"}.get(c.literal)
    if c.literal == "struct":
        kind: dict = {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
                      "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}]}
    else:
        kind = {"type": literal}
    if c.logical:
        kind.update({"connect.version": 1, "connect.name": c.logical})
    if c.parameters:
        kind["connect.parameters"] = c.parameters
    if c.logical == "org.apache.kafka.connect.data.Decimal":
        kind.update(logicalType="decimal", precision=int(c.parameters["connect.decimal.precision"]),
                    scale=int(c.parameters["scale"]))
    if c.logical == "org.apache.kafka.connect.data.Timestamp":
        kind["logicalType"] = "timestamp-millis"
    return kind if c.name == "id" else ["null", kind]


def avro_envelope(topic: str) -> dict:
    """The change events' Avro schema as Debezium's AvroConverter registers it."""
    name = topic.replace("-", "_").replace(".", "_")
    value = {"type": "record", "name": "Value", "namespace": name,
             "fields": [{"name": c.name, "type": _avro_type(c), **({} if c.name == "id" else {"default": None})}
                        for c in COLUMNS]}
    source = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
              "fields": [{"name": "ts_ms", "type": "long"}, {"name": "lsn", "type": ["null", "long"], "default": None}]}
    return {"type": "record", "name": "Envelope", "namespace": name, "fields": [
        {"name": "before", "type": ["null", value], "default": None},
        {"name": "after", "type": ["null", f"{name}.Value"], "default": None},
        {"name": "source", "type": source}, {"name": "op", "type": "string"}]}


AVRO_LOGICAL = ("org.apache.kafka.connect.data.Decimal", "org.apache.kafka.connect.data.Timestamp")  # Avro's own


def avro_image(values: dict[str, Any] | None) -> dict | None:
    """A row's image as the AvroConverter's serializer takes it: each value as Debezium encodes it, but for what
    Avro's own logical types carry (decimals, Connect's Timestamp) and bytes left raw."""
    if values is None:
        return None
    out = {}
    for c in COLUMNS:
        v = values.get(c.name)
        if v is None or c.logical in AVRO_LOGICAL:
            out[c.name] = v
        elif c.literal == "struct":
            scale = -v.as_tuple().exponent
            out[c.name] = {"scale": scale, "value": base64.b64decode(_unscaled(v, scale))}
        else:
            out[c.name] = c.encode(v)
    return out


def avro_typed(stream: TypedStream, registry_url: str, topic: str) -> list[Change]:
    """``stream``'s changes as Debezium's AvroConverter writes them, the schema registered at ``registry_url``."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url})
    values = AvroSerializer(client, json.dumps(avro_envelope(topic)))
    ctx = SerializationContext(topic, MessageField.VALUE)
    out = []
    for c in stream.changes:
        value = None
        if c.value is not None:
            before, after = stream.images[c.offset]
            value = values({"before": avro_image(before), "after": avro_image(after), "op": c.op,
                            "source": {"ts_ms": 1, "lsn": c.offset}}, ctx)
        out.append(Change(c.partition, c.offset, c.key, value, c.order_id, c.op))
    return out


_JSON_TYPES = {"int32": "integer", "int64": "integer", "string": "string", "bytes": "number", "struct": "object"}


def _json_schema_type(c: TypedColumn) -> dict:
    """A column's JSON Schema as Confluent's JsonSchemaConverter writes Debezium's (the Connect name as its title;
    a decimal a number, written exactly); optional columns one of null or it."""
    kind: dict[str, Any] = {"type": _JSON_TYPES[c.literal]}
    if c.literal in ("int32", "int64", "bytes"):
        kind["connect.type"] = c.literal
    if c.literal == "struct":
        kind["properties"] = {"scale": {"type": "integer", "connect.type": "int32"},
                              "value": {"type": "string", "connect.type": "bytes"}}
    if c.logical:
        kind.update({"title": c.logical, "connect.version": 1})
    if c.parameters:
        kind["connect.parameters"] = c.parameters
    return kind if c.name == "id" else {"oneOf": [{"type": "null"}, kind]}


def json_schema_envelope() -> dict:
    """The change events' JSON Schema as Debezium's JsonSchemaConverter registers it."""
    row = {"type": "object", "title": "typed.Value", "properties": {c.name: _json_schema_type(c) for c in COLUMNS}}
    return {"type": "object", "title": "typed.Envelope", "properties": {
        "before": {"oneOf": [{"type": "null"}, row]}, "after": {"oneOf": [{"type": "null"}, row]},
        "source": {"type": "object", "properties": {"ts_ms": {"type": "integer"}, "lsn": {"type": "integer"}}},
        "op": {"type": "string"}}}


def json_schema_typed(stream: TypedStream, registry_url: str, topic: str) -> list[Change]:
    """``stream``'s changes as Debezium's JsonSchemaConverter writes them (Confluent's wire format: magic byte, the
    registered schema's id, the JSON text; decimals as exact numbers, which Python's JSON serializer would round)."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    schema_id = client.register_schema(f"{topic}-value", Schema(json.dumps(json_schema_envelope()), "JSON"))
    decimals = {c.name for c in COLUMNS if c.logical == "org.apache.kafka.connect.data.Decimal"}
    out = []
    for c in stream.changes:
        value = None
        if c.value is not None:
            before, after = (encoded(image, decimals) or "null" for image in stream.images[c.offset])
            payload = f'{{"before": {before}, "after": {after}, "source": {{"ts_ms": 1, "lsn": {c.offset}}}, ' \
                      f'"op": "{c.op}"}}'
            value = b"\x00" + schema_id.to_bytes(4, "big") + payload.encode()
        out.append(Change(c.partition, c.offset, c.key, value, c.order_id, c.op))
    return out
