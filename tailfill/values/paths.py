"""Nested columns named by a dotted path (``repo.id``, ``payload.created_at``): their type in a schema and their
values in a table. A path goes through structs only: a list's or a map's elements have no single value per row."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

NAME = r"[A-Za-z_][A-Za-z0-9_]*"
PATH = rf"{NAME}(?:\.{NAME})*"


def type_at(schema: pa.Schema, path: str) -> pa.DataType:
    """The type of the column at ``path``; a ValueError says which step of the path does not exist or is not a
    struct."""
    top, *rest = path.split(".")
    if top not in schema.names:
        raise ValueError(f"no column {top!r}")
    kind, walked = schema.field(top).type, top
    for name in rest:
        if not pa.types.is_struct(kind):
            raise ValueError(f"{walked} holds {kind}, not a struct: {path!r} cannot reach into it")
        index = kind.get_field_index(name)
        if index < 0:
            raise ValueError(f"{walked} has no field {name!r} (fields: {', '.join(f.name for f in kind)})")
        kind, walked = kind.field(index).type, f"{walked}.{name}"
    return kind


def column_at(data: pa.Table | pa.RecordBatch, path: str) -> pa.Array | pa.ChunkedArray:
    """The values of the column at ``path`` (null where a struct on the way is null)."""
    top, *rest = path.split(".")
    column = data.column(top)
    for name in rest:
        column = pc.struct_field(column, name)
    return column
