"""The rules by which a table's columns follow its records' schemas: what is added, promoted or a conflict.

A column a writer schema adds becomes a new optional column of the table (``union_by_name``: existing
field ids stay); int → long, float → double and a wider decimal are promoted; any other change of a
column's type is a conflict, which the pipeline's ``on_incompatible_schema`` decides (quarantine the
records on the executors, or stop the run before anything is committed). The rules only: the table
is changed by :mod:`tailfill.lake.schema_change`.

JSON records with fields not declared (``format.unknown_fields: evolve``) want columns of the types inferred from
their values: :func:`columns_to_add` joins them (:func:`widen`: a struct gains fields, a list's items widen, long
joins double) into the columns the table takes.

A registry table also records, in its property ``tailfill.required-fields``, the top-level fields the
subject's latest schema required when the table was made (:func:`required_properties`); a writer schema
without one of them is a conflict too, decided the same way (on the executors, which see the fields).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pyarrow as pa

from tailfill.values.column_types import SCALARS
from tailfill.values.schema import field_type

SCALAR_PROMOTIONS = {(pa.int32(), pa.int64()), (pa.float32(), pa.float64())}  # (from, to)
REQUIRED_PROP = "tailfill.required-fields"  # JSON list of top-level columns every writer schema must have


def canon(kind: pa.DataType) -> pa.DataType:
    """``kind`` as this module compares it: plain (not large) strings, binaries and lists, list items
    named ``item``, every nested field nullable, no field metadata (Iceberg's field ids)."""
    if pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_large_binary(kind):
        return pa.binary()
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(canon(kind.value_type))
    if pa.types.is_map(kind):
        return pa.map_(canon(kind.key_type), canon(kind.item_type))
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, canon(f.type)) for f in kind])
    return kind


def promotes(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether a column of type ``old`` can hold values of type ``new`` after an allowed promotion (or none)."""
    old, new = canon(old), canon(new)
    if old == new:
        return True
    if (old, new) in SCALAR_PROMOTIONS:
        return True
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return old.scale == new.scale and new.precision >= old.precision
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        return all(fits(old.field(f.name).type, f.type) for f in new if old.get_field_index(f.name) >= 0)
    if pa.types.is_list(old) and pa.types.is_list(new):
        return fits(old.value_type, new.value_type)
    if pa.types.is_map(old) and pa.types.is_map(new):
        return old.key_type == new.key_type and fits(old.item_type, new.item_type)
    return False


def fits(table_type: pa.DataType, writer_type: pa.DataType) -> bool:
    """Whether values of ``writer_type`` can go into a column of ``table_type`` (as is, promoted, or narrower)."""
    return promotes(table_type, writer_type) or promotes(writer_type, table_type)


def conflicts(columns: pa.Schema, table: pa.Schema, source: str = "the writer schema") -> list[str]:
    """Each column of ``columns`` whose type cannot go into the same-named column of ``table``, as
    ``field 'x': the table has long, the writer schema has string`` (``source``: who says so)."""
    out = []
    for f in columns:
        i = table.get_field_index(f.name)
        if i >= 0 and not fits(table.field(i).type, f.type):
            out.append(f"field '{f.name}': the table has {canon(table.field(i).type)}, {source} has {canon(f.type)}")
    return out


def missing_required(columns: pa.Schema, table: pa.Schema, source: str = "the writer schema") -> list[str]:
    """Each field ``table`` requires (not nullable, as ``lake.schema_change.table_columns`` marks them) that ``columns``
    lacks, as ``field 'x': the table requires it (long), the writer schema does not have it``."""
    return [f"field '{f.name}': the table requires it ({canon(f.type)}), {source} does not have it"
            for f in table if not f.nullable and columns.get_field_index(f.name) < 0]


def required_properties(required: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The table properties that record ``required`` (top-level field names), which a new table of a registry format
    gets."""
    return {REQUIRED_PROP: json.dumps(sorted(required))}


def describe_change(current: pa.Schema, columns: pa.Schema) -> str:
    added = [f.name for f in columns if current.get_field_index(f.name) < 0]
    changed = [f"{f.name} {canon(current.field(f.name).type)} → {canon(f.type)}" for f in columns
               if current.get_field_index(f.name) >= 0 and canon(current.field(f.name).type) != canon(f.type)
               and not _narrower(f.type, current.field(f.name).type)]
    return "; ".join([*(["added " + ", ".join(added)] if added else []), *(["widened " + ", ".join(changed)]
                                                                           if changed else [])])


def needs_change(current: pa.Schema, columns: pa.Schema) -> bool:
    """Whether ``columns`` has a column (or nested field) ``current`` lacks, or a wider type than it has."""
    for f in columns:
        i = current.get_field_index(f.name)
        if i < 0:
            return True
        old, new = canon(current.field(i).type), canon(f.type)
        if old != new and promotes(old, new) and not _narrower(new, old):
            return True
    return False


def _narrower(new: pa.DataType, old: pa.DataType) -> bool:
    """Whether ``new`` only drops or narrows what ``old`` has (nothing to add to the table or widen in it)."""
    new, old = canon(new), canon(old)
    if new == old:
        return True
    if pa.types.is_struct(new) and pa.types.is_struct(old):
        return all(old.get_field_index(f.name) >= 0 and _narrower(f.type, old.field(f.name).type) for f in new)
    if pa.types.is_list(new) and pa.types.is_list(old):
        return _narrower(new.value_type, old.value_type)
    if pa.types.is_map(new) and pa.types.is_map(old):
        return new.key_type == old.key_type and _narrower(new.item_type, old.item_type)
    if (new, old) in SCALAR_PROMOTIONS:
        return True
    return pa.types.is_decimal(new) and pa.types.is_decimal(old) and new.scale == old.scale \
        and new.precision <= old.precision


def optional(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field (nested ones too) nullable: a new column is optional, earlier rows read null."""
    return pa.schema([_nullable(f) for f in schema])


def _nullable(f: pa.Field) -> pa.Field:
    kind = f.type
    if pa.types.is_struct(kind):
        kind = pa.struct([_nullable(c) for c in kind])
    elif pa.types.is_list(kind):
        kind = pa.list_(_nullable(kind.value_field))
    elif pa.types.is_map(kind):
        kind = pa.map_(kind.key_field.type, _nullable(kind.item_field))
    return pa.field(f.name, kind, nullable=True)


def widen(old: pa.DataType, new: pa.DataType) -> pa.DataType | None:
    """One type that holds the values of both, keeping ``old``'s fields in their order; None when there is none."""
    old, new = canon(old), canon(new)
    if old == new:
        return old
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        fields = []
        for f in old:
            i = new.get_field_index(f.name)
            kind = f.type if i < 0 else widen(f.type, new.field(i).type)
            if kind is None:
                return None
            fields.append(pa.field(f.name, kind))
        fields += [pa.field(f.name, f.type) for f in new if old.get_field_index(f.name) < 0]
        return pa.struct(fields)
    if pa.types.is_list(old) and pa.types.is_list(new):
        item = widen(old.value_type, new.value_type)
        return pa.list_(item) if item is not None else None
    if {old, new} == {pa.int64(), pa.float64()}:
        return pa.float64()
    return None


_NAMES = {kind: name for name, kind in SCALARS.items()}


def type_name(kind: pa.DataType) -> str:
    """A column's type (one :func:`value_type` infers, :func:`widen` joins, or the table has), as ``format.fields``
    writes it."""
    kind = canon(kind)
    if pa.types.is_struct(kind):
        return f"struct<{', '.join(f'{f.name}: {type_name(f.type)}' for f in kind)}>"
    if pa.types.is_list(kind):
        return f"list<{type_name(kind.value_type)}>"
    if pa.types.is_map(kind):
        return f"map<{type_name(kind.key_type)}, {type_name(kind.item_type)}>"
    if pa.types.is_decimal(kind):
        return f"decimal({kind.precision}, {kind.scale})"
    return _NAMES.get(kind, str(kind))


def columns_to_add(table: pa.Schema, wants: Iterable[dict[str, dict[str, list[int]]]]) -> pa.Schema:
    """The columns (new, or wider than ``table``'s) that values of the wanted types need (``wants``: per column, per
    type ``format.fields`` writes, the first ``[partition, offset]`` that needed it; see
    :class:`tailfill.values.drift.Drift`). Each column is the join (:func:`widen`) of its types taken earliest offset
    first; a type that joins none before it is left out: its records go to the quarantine. New columns come in the
    order their records hold them: earliest offset first, and a record's fields in its own order (as ``wants`` lists
    them)."""
    ordered = sorted(((tuple(at), name, kind) for w in wants for name, types in w.items()
                      for kind, at in types.items()), key=lambda want: want[0])  # stable: a record's own order
    joined: dict[str, pa.DataType] = {}
    for _, name, kind in ordered:
        i = table.get_field_index(name)
        base = joined.get(name, canon(table.field(i).type) if i >= 0 else None)
        new = field_type(kind) if base is None else widen(base, field_type(kind))
        if new is not None:
            joined[name] = new
    return pa.schema([pa.field(name, kind) for name, kind in joined.items()
                      if table.get_field_index(name) < 0 or canon(table.field(name).type) != kind])
