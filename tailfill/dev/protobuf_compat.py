"""Protobuf schema compatibility, for the development registry's ``BACKWARD`` check (the new schema reads
what the previous one wrote), on serialized FileDescriptorProtos (what confluent-kafka registers).

A small, honest subset of Confluent's rules, message by message (by full name, nested ones too):
a field number whose type changes to one that is not wire-compatible (int32/int64/uint32/uint64/bool,
sint32/sint64, fixed32/sfixed32, fixed64/sfixed64, string/bytes are), that changes between repeated
and single, or that names another message or enum; a proto2 ``required`` field removed, or added.
"""

from __future__ import annotations

import base64
import binascii

from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

P = descriptor_pb2.FieldDescriptorProto
_GROUPS = [{P.TYPE_INT32, P.TYPE_INT64, P.TYPE_UINT32, P.TYPE_UINT64, P.TYPE_BOOL}, {P.TYPE_SINT32, P.TYPE_SINT64},
           {P.TYPE_FIXED32, P.TYPE_SFIXED32}, {P.TYPE_FIXED64, P.TYPE_SFIXED64}, {P.TYPE_STRING, P.TYPE_BYTES}]


def parse_file(text: str) -> descriptor_pb2.FileDescriptorProto:
    """The FileDescriptorProto of a registered Protobuf schema (base64); ValueError if it is not one."""
    try:
        return descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, DecodeError, ValueError) as exc:
        raise ValueError(f"not a serialized FileDescriptorProto: {exc}") from None


def _messages(protos: list, prefix: str, out: dict[str, descriptor_pb2.DescriptorProto]) -> dict:
    for m in protos:
        name = f"{prefix}.{m.name}" if prefix else m.name
        out[name] = m
        _messages(list(m.nested_type), name, out)
    return out


def _type_name(f: P) -> str:
    return {P.TYPE_MESSAGE: "message", P.TYPE_ENUM: "enum"}.get(f.type) or P.Type.Name(f.type)[5:].lower()


def _field_problem(r: P, w: P) -> str | None:
    """Why field ``w`` (written) cannot be read as ``r`` (same number), or None."""
    if (r.label == P.LABEL_REPEATED) != (w.label == P.LABEL_REPEATED):
        return "changes between repeated and single"
    if r.type in (P.TYPE_MESSAGE, P.TYPE_ENUM) or w.type in (P.TYPE_MESSAGE, P.TYPE_ENUM):
        if r.type != w.type or r.type_name != w.type_name:
            return f"type {w.type_name or _type_name(w)} became {r.type_name or _type_name(r)}"
        return None
    if r.type != w.type and not any(r.type in g and w.type in g for g in _GROUPS):
        return f"type {_type_name(w)} became {_type_name(r)}"
    return None


def backward_problems(reader: descriptor_pb2.FileDescriptorProto, writer: descriptor_pb2.FileDescriptorProto
                      ) -> list[str]:
    """Why messages written with ``writer`` cannot be read with ``reader``, or []."""
    rm, wm = _messages(list(reader.message_type), reader.package, {}), _messages(list(writer.message_type),
                                                                                   writer.package, {})
    problems = []
    for name in sorted(rm.keys() & wm.keys()):
        rf, wf = {f.number: f for f in rm[name].field}, {f.number: f for f in wm[name].field}
        for number in sorted(rf.keys() | wf.keys()):
            r, w = rf.get(number), wf.get(number)
            if r is None:
                if w.label == P.LABEL_REQUIRED:
                    problems.append(f"{name}.{w.name} (field {number}): a required field is removed")
            elif w is None:
                if r.label == P.LABEL_REQUIRED:
                    problems.append(f"{name}.{r.name} (field {number}): a required field is added")
            elif why := _field_problem(r, w):
                problems.append(f"{name}.{r.name} (field {number}): {why}")
    return problems
