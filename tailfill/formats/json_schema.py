"""JSON Schema records (Confluent wire format) decoded and checked against their writer schema's types.

object with properties → struct, array → list, an object with only additionalProperties → map,
string (format date-time → timestamp, date → date), integer → long, number → double, boolean;
["null", T] or anyOf/oneOf with null → optional T; $ref to #/definitions or #/$defs is followed.
A top-level property listed in the schema's ``required`` is a required field. A key schema
(``format.key: registry``) may be of any type: ``{"type": "string"}``, an object.

A property whose ``title`` is a Kafka Connect or Debezium logical type (what Confluent's JsonSchemaConverter
writes: ``io.debezium.time.Date`` on an integer) takes that type's column
(:func:`~tailfill.formats.connect_types.registry_type`), and its values are converted into it, at the top level
and in the top level's objects (a Debezium envelope's ``before`` and ``after``). Numbers are parsed exactly.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pyarrow as pa

from tailfill.errors import RecordError
from tailfill.formats.connect_types import LOGICAL_TYPES, Column, convert_row, kind_of, registry_type
from tailfill.formats.wire import WireFormat
from tailfill.values.column_types import TIMESTAMP, coerce

SIMPLE = {"integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}


def resolve(node: Any, root: dict) -> Any:
    """``node`` with its ``$ref``s (inside the schema, ``#/...``) followed; ValueError for any other."""
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            raise ValueError(f"$ref {ref!r}: only references inside the schema (#/...) are supported")
        node = root
        for part in ref[2:].split("/"):
            node = node[part]
    return node


def _arrow(node: Any, root: dict, depth: int = 0) -> pa.DataType:
    if depth > 32:
        raise ValueError("nested more than 32 levels deep (a recursive schema has no column type)")
    node = resolve(node, root)
    if not isinstance(node, dict):
        raise ValueError(f"schema {json.dumps(node)[:60]} has no column type")
    if (connected := registry_type(node.get("title"), node.get("connect.parameters", {}))) is not None:
        return connected
    for key in ("anyOf", "oneOf"):
        if key in node:
            branches = [b for b in node[key] if resolve(b, root) != {"type": "null"}]
            if len(branches) != 1:
                raise ValueError(f"{key} with several non-null schemas has no column type")
            return _arrow(branches[0], root, depth + 1)
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            raise ValueError(f"type {kind} has several non-null types (no column type)")
        kind = kinds[0]
    if kind == "object":
        props = node.get("properties")
        extra = node.get("additionalProperties")
        if not props and isinstance(extra, dict):
            return pa.map_(pa.string(), _arrow(extra, root, depth + 1))
        return pa.struct([pa.field(k, _arrow(v, root, depth + 1)) for k, v in (props or {}).items()])
    if kind == "array":
        return pa.list_(_arrow(node.get("items", {}), root, depth + 1))
    if kind == "string":
        return {"date-time": TIMESTAMP, "date": pa.date32()}.get(node.get("format"), pa.string())
    if kind in SIMPLE:
        return SIMPLE[kind]
    raise ValueError(f"schema {json.dumps(node)[:60]} has no column type (give it a type)")


def _non_null(node: Any, root: dict) -> Any:
    """``node`` resolved, and of an anyOf/oneOf with null, its other branch."""
    node = resolve(node, root)
    for key in ("anyOf", "oneOf"):
        if isinstance(node, dict) and key in node:
            branches = [b for b in node[key] if resolve(b, root) != {"type": "null"}]
            return resolve(branches[0], root) if len(branches) == 1 else node
    return node


def titled(node: Any, root: dict) -> dict[str, tuple[str, dict]]:
    """The Kafka Connect logical types (``title``, ``connect.parameters``) of an object schema's properties."""
    node = _non_null(node, root)
    out = {}
    for name, prop in ((node.get("properties") or {}) if isinstance(node, dict) else {}).items():
        prop = _non_null(prop, root)
        if isinstance(prop, dict) and prop.get("title") in LOGICAL_TYPES:
            out[name] = (prop["title"], prop.get("connect.parameters") or {})
    return out


def json_type(root: Any) -> pa.DataType:
    """The Arrow type of a whole JSON Schema (an object, a string, ...); ValueError if it has none."""
    return _arrow(root, root)


class JsonSchemaWriter:
    """Decodes JSON payloads whose writer schema is one JSON Schema: each value is checked against its types."""

    def __init__(self, text: str, imports: dict[str, str] | None = None):  # no imports: see WireFormat.build
        root = json.loads(text)
        kind = json_type(root)
        if not pa.types.is_struct(kind):
            raise ValueError("the top-level JSON Schema is not an object with properties")
        self.columns = pa.schema(list(kind))
        top = resolve(root, root)
        self.required = tuple(n for n in top.get("required", []) if n in self.columns.names)
        # what to convert: (None: the top level, or an object property) -> (its logical types, its columns)
        self.converts: dict[str | None, tuple[dict, dict]] = {}
        for name, fields in [(None, list(self.columns)), *((f.name, list(f.type)) for f in self.columns
                                                            if pa.types.is_struct(f.type))]:
            logicals = titled(root if name is None else top["properties"][name], root)
            if logicals:
                self.converts[name] = (logicals, {f.name: Column(f.type, kind_of(f.type)) for f in fields})

    def columns_of(self, variant: tuple) -> pa.Schema:
        return self.columns

    def required_of(self, variant: tuple) -> tuple[str, ...]:
        return self.required

    def read(self, payload: bytes) -> tuple[tuple, dict]:
        """((), the value's fields as Python values of their column types); RecordError if one does not fit."""
        doc = json.loads(payload, parse_float=Decimal)
        if not isinstance(doc, dict):
            raise RecordError(f"JSON value is a {type(doc).__name__}, expected an object")
        for name, (logicals, columns) in self.converts.items():
            if name is None:
                doc = convert_row(doc, logicals, columns)
            elif isinstance(doc.get(name), dict):
                doc[name] = convert_row(doc[name], logicals, columns)
        return (), {f.name: coerce(doc.get(f.name), f.type, f.name) for f in self.columns}


class JsonKey:
    """Keys written with one JSON Schema of any type, each checked against it."""

    def __init__(self, text: str, imports: dict[str, str] | None = None):  # no imports: see WireFormat.build
        self.kind = json_type(json.loads(text))

    def type_of(self, variant: tuple) -> pa.DataType:
        return self.kind

    def read(self, payload: bytes) -> tuple[tuple, object]:
        return (), coerce(json.loads(payload), self.kind, "kafka_key")


class JsonSchemaFormat(WireFormat):
    """``json_schema``: JSON values with their writer schemas (JSON Schema) in the registry."""

    name = "json_schema"
    schema_type = "JSON"
    writer_class = JsonSchemaWriter
    key_class = JsonKey
