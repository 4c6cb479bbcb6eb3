"""Column types inferred from sample JSON records, written as ``format.fields`` takes them.

:func:`infer_fields` merges what every sampled record holds: numbers (``long``, ``double`` when any is
fractional), ``boolean``, strings (``timestamp`` or ``date`` when every value is an ISO-8601 one),
nested objects (``struct<…>``, the union of their keys) and arrays (``list<…>``). A field whose values
disagree (a number here, an object there) becomes ``string`` with a note; a field that was only ever
null, an empty object, or a name the type syntax cannot hold is left out, with a note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from tailfill.values.paths import NAME
from tailfill.values.schema import RESERVED_PREFIX

PLAIN_NAME = re.compile(rf"^{NAME}$")


@dataclass
class Kind:
    """What the values of one field were: a scalar type name, ``struct`` (with ``fields``), ``list`` (with
    ``item``), ``null`` (only nulls so far) or ``mixed``."""

    name: str
    fields: dict[str, Kind] = field(default_factory=dict)
    item: Kind | None = None
    seen: set[str] = field(default_factory=set)  # for mixed: the kinds that disagreed


@dataclass(frozen=True)
class InferredField:
    name: str
    type: str
    present: int  # records holding a non-null value


def kind_of(value: Any) -> Kind:
    """What one JSON value is."""
    if value is None:
        return Kind("null")
    if isinstance(value, bool):
        return Kind("boolean")
    if isinstance(value, int):
        return Kind("long")
    if isinstance(value, float):
        return Kind("double")
    if isinstance(value, str):
        return Kind(_string_kind(value))
    if isinstance(value, dict):
        return Kind("struct", {k: kind_of(v) for k, v in value.items()})
    if isinstance(value, list):
        item = Kind("null")
        for v in value:
            item = merge(item, kind_of(v))
        return Kind("list", item=item)
    return Kind("string")


def _string_kind(text: str) -> str:
    if len(text) == 10:
        try:
            date.fromisoformat(text)
            return "date"
        except ValueError:
            return "string"
    if 16 <= len(text) <= 40 and text[10:11] in ("T", " "):
        try:
            datetime.fromisoformat(text)
            return "timestamp"
        except ValueError:
            return "string"
    return "string"


def merge(a: Kind, b: Kind) -> Kind:
    """One kind for the values of both."""
    if a.name == "null":
        return b
    if b.name == "null":
        return a
    if a.name == b.name == "struct":
        keys = dict.fromkeys([*a.fields, *b.fields])
        return Kind("struct", {k: merge(a.fields.get(k, Kind("null")), b.fields.get(k, Kind("null"))) for k in keys})
    if a.name == b.name == "list":
        return Kind("list", item=merge(a.item or Kind("null"), b.item or Kind("null")))
    if a.name == b.name and a.name != "mixed":
        return a
    if {a.name, b.name} == {"long", "double"}:
        return Kind("double")
    if {a.name, b.name} <= {"string", "timestamp", "date"}:
        return Kind("string")
    return Kind("mixed", seen=(a.seen or {a.name}) | (b.seen or {b.name}))


def type_text(kind: Kind, path: str, notes: list[str]) -> str | None:
    """``kind`` as ``format.fields`` writes a type; None (with a note) for a kind no type can hold."""
    if kind.name == "null":
        notes.append(f"{path}: only nulls were seen: not declared")
        return None
    if kind.name == "mixed":
        notes.append(f"{path}: values of several kinds ({', '.join(sorted(kind.seen))}): declared string; records "
                     "with a value that is not a string go to the quarantine")
        return "string"
    if kind.name == "list":
        item = type_text(kind.item or Kind("null"), f"{path}[]", [])
        return f"list<{item or 'string'}>"
    if kind.name == "struct":
        parts = []
        for name, sub in kind.fields.items():
            if not PLAIN_NAME.match(name):
                notes.append(f"{path}.{name}: not a plain identifier: not declared")
                continue
            text = type_text(sub, f"{path}.{name}", notes)
            if text is not None:
                parts.append(f"{name}: {text}")
        if not parts:
            notes.append(f"{path}: no field could be declared: not declared")
            return None
        return f"struct<{', '.join(parts)}>"
    return kind.name


def infer_fields(records: list[dict]) -> tuple[list[InferredField], list[str]]:
    """The top-level fields of ``records`` (first seen first) with their types, and notes on what was left out or
    widened."""
    kinds: dict[str, Kind] = {}
    present: dict[str, int] = {}
    for record in records:
        for name, value in record.items():
            kinds[name] = merge(kinds.get(name, Kind("null")), kind_of(value))
            present[name] = present.get(name, 0) + (value is not None)
    fields, notes = [], []
    for name, kind in kinds.items():
        if not PLAIN_NAME.match(name) or name.startswith(RESERVED_PREFIX):
            notes.append(f"{name}: not a plain identifier, or the Kafka metadata's prefix {RESERVED_PREFIX}: "
                         "not declared")
            continue
        text = type_text(kind, name, notes)
        if text is not None:
            fields.append(InferredField(name, text, present[name]))
    return fields, notes
