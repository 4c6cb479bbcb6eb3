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
from tailfill.formats.evolve import canon, type_name
from tailfill.formats.json_drift import extra_paths, value_type
from tailfill.values.column_types import coerce
from tailfill.values.infer import PLAIN_NAME
from tailfill.values.schema import RESERVED_PREFIX


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
                wants.setdefault((name, value_type([value]) or type_name(kind)), p)
    arrays = [pa.array(values[f.name], f.type) for f in columns]
    return Evolved(arrays, refused, [(name, text, p) for (name, text), p in wants.items()])


def _can_be_column(name: str) -> bool:
    return bool(PLAIN_NAME.match(name)) and not name.startswith(RESERVED_PREFIX)
