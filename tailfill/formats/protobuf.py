"""Protobuf records decoded with their writer schema (a serialized FileDescriptorProto from the registry).

message → struct, repeated → list, map<k, v> → map, enum → string, int32/sint32/sfixed32 → int,
other integers → long, float/double, bool, string, bytes → binary, google.protobuf.Timestamp →
timestamp (UTC, µs), wrapper types (Int64Value, StringValue, ...) → their optional value. A field
without presence (a proto3 scalar not marked ``optional``) reads as its default when absent, as
Protobuf itself says. A schema may import Google's well-known types and the files its registry
references give (other subjects); any other import is refused.
Only proto2's ``required`` fields are required fields: in proto3 every field is optional. A key
schema (``format.key: registry``) is a message too: ``kafka_key`` is its struct.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from google.protobuf import (  # the well-known types' modules put their files in the default pool
    any_pb2,  # noqa: F401
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,  # noqa: F401
    message_factory,
    struct_pb2,  # noqa: F401
    timestamp_pb2,  # noqa: F401
    wrappers_pb2,  # noqa: F401
)
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from tailfill.formats.wire import WireFormat
from tailfill.values.column_types import TIMESTAMP

F = FieldDescriptor
SCALARS = {
    F.TYPE_INT32: pa.int32(), F.TYPE_SINT32: pa.int32(), F.TYPE_SFIXED32: pa.int32(), F.TYPE_UINT32: pa.int64(),
    F.TYPE_FIXED32: pa.int64(), F.TYPE_INT64: pa.int64(), F.TYPE_SINT64: pa.int64(), F.TYPE_SFIXED64: pa.int64(),
    F.TYPE_UINT64: pa.int64(), F.TYPE_FIXED64: pa.int64(), F.TYPE_FLOAT: pa.float32(), F.TYPE_DOUBLE: pa.float64(),
    F.TYPE_BOOL: pa.bool_(), F.TYPE_STRING: pa.string(), F.TYPE_BYTES: pa.binary(), F.TYPE_ENUM: pa.string(),
}
WRAPPERS = {f"google.protobuf.{n}Value" for n in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool",
                                                  "String", "Bytes")}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def message_indexes(payload: bytes, at: int) -> tuple[list[int], int]:
    """The message index path after the schema id (zig-zag varints: a count, then the indexes), and where
    the message starts. A single 0 means the first message of the file."""
    values, pos = [], at
    count, pos = _zigzag(payload, pos)
    if count == 0:
        return [0], pos
    if not 0 < count <= 32:
        raise ValueError(f"bad message index count {count}")
    for _ in range(count):
        value, pos = _zigzag(payload, pos)
        values.append(value)
    return values, pos


def _zigzag(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated message indexes")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _arrow(field: FieldDescriptor, depth: int) -> pa.DataType:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return pa.map_(SCALARS[key.type], _single(value, depth + 1))
    kind = _single(field, depth)
    return pa.list_(kind) if field.is_repeated else kind


def _single(field: FieldDescriptor, depth: int) -> pa.DataType:
    if field.type in SCALARS:
        return SCALARS[field.type]
    return _message_type(field.message_type, depth + 1)


def _message_type(message: Descriptor, depth: int) -> pa.DataType:
    if depth > 32:
        raise ValueError(f"{message.full_name} nests more than 32 levels deep (a recursive message has no column type)")
    if message.full_name == "google.protobuf.Timestamp":
        return TIMESTAMP
    if message.full_name in WRAPPERS:
        return _single(message.fields_by_name["value"], depth)
    return pa.struct([pa.field(f.name, _arrow(f, depth)) for f in message.fields])


def _value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == F.TYPE_ENUM:
        number = field.enum_type.values_by_number.get(value)
        return number.name if number is not None else str(value)
    if field.type != F.TYPE_MESSAGE:
        return value
    full = field.message_type.full_name
    if full == "google.protobuf.Timestamp":
        return _EPOCH + timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)
    if full in WRAPPERS:
        return value.value
    return _row(value)


def _row(message: Any) -> dict:
    out = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            vfield = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _value(vfield, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_value(field, v) for v in value]
        elif field.has_presence and not message.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _value(field, value)
    return out


def _file(text: str) -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))


def _add(pool: descriptor_pool.DescriptorPool, proto: descriptor_pb2.FileDescriptorProto, imports: dict[str, str],
         added: set[str]) -> None:
    """Add ``proto`` to ``pool`` after the files it imports: Google's well-known types, or ``imports``."""
    for dep in proto.dependency:
        if dep in added:
            continue
        added.add(dep)
        if dep in imports:
            _add(pool, _file(imports[dep]), imports, added)
            continue
        try:
            known = descriptor_pool.Default().FindFileByName(dep)
        except KeyError:
            raise ValueError(f"imports {dep!r}, which is neither one of Google's well-known types nor a reference "
                             "the registry gives") from None
        dep_proto = descriptor_pb2.FileDescriptorProto()
        known.CopyToProto(dep_proto)
        pool.Add(dep_proto)
    pool.Add(proto)


class ProtobufWriter:
    """Decodes payloads written with one Protobuf schema (a FileDescriptorProto, built once); ``imports``: the
    serialized files its registry references give, by import name."""

    def __init__(self, text: str, imports: dict[str, str] | None = None):
        proto = _file(text)
        pool = descriptor_pool.DescriptorPool()
        _add(pool, proto, imports or {}, set())
        self.file = pool.FindFileByName(proto.name)
        if not self.file.message_types_by_name:
            raise ValueError("the Protobuf schema declares no message")
        self.classes: dict[tuple[int, ...], tuple[type, pa.Schema, tuple[str, ...]]] = {}

    def message(self, indexes: list[int]) -> tuple[type, pa.Schema, tuple[str, ...]]:
        """The message class, columns and required fields (proto2) of the message at ``indexes`` (top-level,
        then nested)."""
        key = tuple(indexes)
        if key not in self.classes:
            messages = list(self.file.message_types_by_name.values())
            descriptor = None
            for i in indexes:
                if not 0 <= i < len(messages):
                    raise ValueError(f"message index {indexes} is not in the schema")
                descriptor = messages[i]
                messages = list(descriptor.nested_types)
            self.classes[key] = (message_factory.GetMessageClass(descriptor),
                                 pa.schema(list(_message_type(descriptor, 0))),
                                 tuple(f.name for f in descriptor.fields if f.is_required))
        return self.classes[key]

    @property
    def columns(self) -> pa.Schema:
        """The columns of the file's first message (what a subject's value schema describes)."""
        return self.message([0])[1]

    def columns_of(self, variant: tuple[int, ...]) -> pa.Schema:
        return self.message(list(variant))[1]

    def required_of(self, variant: tuple[int, ...]) -> tuple[str, ...]:
        return self.message(list(variant))[2]

    def read(self, payload: bytes) -> tuple[tuple[int, ...], dict]:
        """(the message index path, the message as a dict) — one payload (after the schema id) decoded."""
        indexes, start = message_indexes(payload, 0)
        cls = self.message(indexes)[0]
        return tuple(indexes), _row(cls.FromString(payload[start:]))


class ProtobufKey:
    """Keys written with one Protobuf schema: a message (by its indexes) → struct."""

    def __init__(self, text: str, imports: dict[str, str] | None = None):
        self.writer = ProtobufWriter(text, imports)

    def type_of(self, variant: tuple[int, ...]) -> pa.DataType:
        return pa.struct(list(self.writer.columns_of(variant)))

    def read(self, payload: bytes) -> tuple[tuple[int, ...], object]:
        return self.writer.read(payload)


class ProtobufFormat(WireFormat):
    """``protobuf``: Protobuf messages with their writer schemas (and the ones they reference) in the registry."""

    name = "protobuf"
    schema_type = "PROTOBUF"
    first_variant = (0,)  # a subject's value schema describes the file's first message
    writer_class = ProtobufWriter
    key_class = ProtobufKey
