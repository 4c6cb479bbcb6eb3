"""``format.unknown_fields: evolve`` on the executors: undeclared JSON fields into the table's evolved columns.

The table's columns beyond the declared fields (:func:`evolved_columns`) take the records' values of the same
name; a value that does not fit its column sends its record to the quarantine with the field and both types. A
field the table has no column for yet, or a value wider than its column (a struct with a new key), is *wanted*:
the driver adds or widens the column (:func:`tailfill.formats.evolve.columns_to_add`) and prepares the batch
again, so a batch's rows always come from one table schema (see :mod:`tailfill.run.evolving`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import pyarrow as pa

from tailfill.errors import RecordError
from tailfill.formats.evolve import canon, type_name, widen
from tailfill.formats.json_drift import extra_paths, value_type
from tailfill.values.column_types import coerce
from tailfill.values.infer import PLAIN_NAME
from tailfill.values.schema import RESERVED_PREFIX, field_type


def evolved_columns(table_columns: pa.Schema | None, declared: list[str]) -> pa.Schema:
    """The data table's columns that are neither Kafka metadata nor declared: those ``evolve`` added."""
    if table_columns is None:
        return pa.schema([])
    names = set(declared)
    return pa.schema([pa.field(f.name, canon(f.type)) for f in table_columns
                      if f.name not in names and not f.name.startswith(RESERVED_PREFIX)])


@dataclass
class Evolved:
    """The evolved columns of a batch's good rows, the records refused (position → reason), and the columns wanted
    (``(name, type, position)``, first seen first)."""

    arrays: list[pa.Array]
    refused: dict[int, str] = field(default_factory=dict)
    wants: list[tuple[str, str, int]] = field(default_factory=list)


def fill(positions: list[int], extras: dict[int, dict[str, Any]], columns: pa.Schema) -> Evolved:
    """``columns``' values for the rows at ``positions`` from their undeclared fields ``extras`` (by position)."""
    values: dict[str, list] = {f.name: [None] * len(positions) for f in columns}
    kinds = {f.name: f.type for f in columns}
    refused: dict[int, str] = {}
    wants: dict[tuple[str, str], int] = {}
    for j, p in enumerate(positions):
        for name, raw in extras.get(p, {}).items():
            value = msgspec.json.decode(raw) if isinstance(raw, msgspec.Raw) else raw
            kind = kinds.get(name)
            if kind is None:
                text = value_type([value]) if _can_be_column(name) else None
                if text is not None:
                    wants.setdefault((name, text), p)
                continue
            try:
                values[name][j] = coerce(value, kind, name)
            except RecordError:
                refused[p] = (f"field '{name}': the table has {type_name(kind)}, this record has "
                              f"{value_type([value]) or 'null'}")
                continue
            if extra_paths(value, kind, name):  # a struct with a key its column lacks: the column widens
                wants.setdefault((name, type_name(_with_new_keys(kind, value))), p)
    arrays = [pa.array(values[f.name], f.type) for f in columns]
    return Evolved(arrays, refused, [(name, text, p) for (name, text), p in wants.items()])


def _with_new_keys(kind: pa.DataType, value: Any) -> pa.DataType:
    """``kind`` with the struct keys ``value`` holds beyond it added (their types inferred from ``value``), inside
    structs and lists too: a value that fits its column as it is wants only the keys it lacks, never another type
    for a value the column already takes (a date-looking string in a string, ``[]`` in a list of longs)."""
    if pa.types.is_struct(kind) and isinstance(value, dict):
        fields = [pa.field(f.name, _with_new_keys(f.type, value.get(f.name))) for f in kind]
        for key, sub in value.items():
            text = value_type([sub]) if kind.get_field_index(key) < 0 and PLAIN_NAME.match(key) else None
            if text is not None:
                fields.append(pa.field(key, field_type(text)))
        return pa.struct(fields)
    if pa.types.is_list(kind) and isinstance(value, list):
        item = kind.value_type
        for v in value:
            item = widen(item, _with_new_keys(item, v)) or item
        return pa.list_(item)
    return kind


def _can_be_column(name: str) -> bool:
    return bool(PLAIN_NAME.match(name)) and not name.startswith(RESERVED_PREFIX)
