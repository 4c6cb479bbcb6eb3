"""Record keys in Confluent's wire format (``format.key: registry``), decoded with their own writer schema.

A key schema need not be a record: an Avro ``"string"`` or ``"long"``, a JSON Schema ``{"type":
"string"}`` give ``kafka_key`` that type; an Avro record, a Protobuf message or a JSON object give a
struct. :mod:`tailfill.formats.decode` fetches and caches key schemas as it does value schemas.
"""

from __future__ import annotations

import json

import fastavro
import pyarrow as pa

from tailfill.formats.avro import avro_type, read_avro
from tailfill.formats.json_schema import json_type
from tailfill.formats.protobuf import ProtobufWriter
from tailfill.values.column_types import coerce


class AvroKey:
    """Keys written with one Avro schema of any type."""

    def __init__(self, text: str):
        schema = json.loads(text)
        self.kind = avro_type(schema)
        self.parsed = fastavro.parse_schema(schema)
        self.uuids = "uuid" in text

    def type_of(self, variant: tuple) -> pa.DataType:
        return self.kind

    def read(self, payload: bytes) -> tuple[tuple, object]:
        return (), read_avro(payload, self.parsed, self.uuids)


class JsonKey:
    """Keys written with one JSON Schema of any type, each checked against it."""

    def __init__(self, text: str):
        self.kind = json_type(json.loads(text))

    def type_of(self, variant: tuple) -> pa.DataType:
        return self.kind

    def read(self, payload: bytes) -> tuple[tuple, object]:
        return (), coerce(json.loads(payload), self.kind, "kafka_key")


class ProtobufKey:
    """Keys written with one Protobuf schema: a message (by its indexes) → struct."""

    def __init__(self, text: str, imports: dict[str, str] | None = None):
        self.writer = ProtobufWriter(text, imports)

    def type_of(self, variant: tuple[int, ...]) -> pa.DataType:
        return pa.struct(list(self.writer.columns_of(variant)))

    def read(self, payload: bytes) -> tuple[tuple[int, ...], object]:
        return self.writer.read(payload)


KEYS = {"AVRO": AvroKey, "PROTOBUF": ProtobufKey, "JSON": JsonKey}
