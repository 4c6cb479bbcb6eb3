"""How a table's columns follow its writer schemas: new columns added, promotions applied, conflicts named.

A column a writer schema adds becomes a new optional column of the table (``union_by_name``: existing
field ids stay); int → long, float → double and a wider decimal are promoted; any other change of a
column's type is a conflict, which the pipeline's ``on_incompatible_schema`` decides (quarantine the
records on the executors, or stop the run here before anything is committed).

A registry table also records, in its property ``tailfill.required-fields``, the top-level fields the
subject's latest schema required when the table was made (:func:`required_properties`); a writer schema
without one of them is a conflict too, decided the same way (on the executors, which see the fields).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from tailfill.config import REGISTRY_FORMATS, PipelineConfig
from tailfill.errors import SchemaChangeError
from tailfill.plumbing.retry import retrying
from tailfill.plumbing.warehouse import fs_path
from tailfill.values.schema import table_schema

ATTEMPTS = 5
SCALAR_PROMOTIONS = {(pa.int32(), pa.int64()), (pa.float32(), pa.float64())}  # (from, to)
SCHEMA_CHANGE_PROP = "tailfill.values.schema-change"  # the last change this module made: {"at", "change"}
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
    """Each field ``table`` requires (not nullable, as :func:`registry_columns` marks them) that ``columns``
    lacks, as ``field 'x': the table requires it (long), the writer schema does not have it``."""
    return [f"field '{f.name}': the table requires it ({canon(f.type)}), {source} does not have it"
            for f in table if not f.nullable and columns.get_field_index(f.name) < 0]


def required_properties(required: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The table properties that record ``required`` (top-level field names) for :func:`registry_columns`."""
    return {REQUIRED_PROP: json.dumps(sorted(required))}


def file_columns(fs: pafs.FileSystem, files: list[str]) -> pa.Schema | None:
    """The union of the columns of ``files`` (their Parquet footers), or None without files."""
    schemas = [pq.read_schema(fs_path(f), filesystem=fs) for f in files]
    if not schemas:
        return None
    return pa.unify_schemas([s.remove_metadata() for s in schemas], promote_options="permissive")


def evolve(table: Table, columns: pa.Schema, source: str = "the writer schema") -> bool:
    """Make ``table`` able to take rows of ``columns``: add new columns, promote types. True if it changed.

    Raises :class:`SchemaChangeError` (one line: the field and both types) on a change it cannot make.
    """
    try:  # another writer changed the table meanwhile: look again
        for attempt in retrying(ATTEMPTS, on=CommitFailedException):
            with attempt:
                return _evolve_once(table, columns, source)
    except CommitFailedException:
        raise SchemaChangeError(f"could not update the schema of {table.name()[-1]}: kept conflicting with other "
                                "writers") from None
    raise AssertionError("unreachable: the last attempt returns or raises")


def _evolve_once(table: Table, columns: pa.Schema, source: str) -> bool:
    table.refresh()
    current = table.schema().as_arrow()
    problems = conflicts(columns, current, source)
    if problems:
        raise SchemaChangeError(f"incompatible schema change in {table.name()[-1]}: {'; '.join(problems)}")
    if not _needs_change(current, columns):
        return False
    change = _describe(current, columns)
    with table.transaction() as tx:
        with tx.update_schema() as update:
            update.union_by_name(_optional(columns))
        tx.set_properties({SCHEMA_CHANGE_PROP: json.dumps(
            {"at": datetime.now(UTC).isoformat(timespec="seconds"), "change": change})})
    return True


def _describe(current: pa.Schema, columns: pa.Schema) -> str:
    added = [f.name for f in columns if current.get_field_index(f.name) < 0]
    changed = [f"{f.name} {canon(current.field(f.name).type)} → {canon(f.type)}" for f in columns
               if current.get_field_index(f.name) >= 0 and canon(current.field(f.name).type) != canon(f.type)
               and not _narrower(f.type, current.field(f.name).type)]
    return "; ".join([*(["added " + ", ".join(added)] if added else []), *(["widened " + ", ".join(changed)]
                                                                           if changed else [])])


def schema_line(table: Table) -> str:
    """``table schema: version N, K columns[; requires a, b]; last change <when>: <what>`` (for ``tailfill
    status``; the required fields of a registry table, :data:`REQUIRED_PROP`)."""
    schema = table.schema()
    line = f"table schema: version {schema.schema_id}, {len(schema.fields)} columns"
    required = json.loads(table.properties.get(REQUIRED_PROP, "[]"))
    if required:
        line += f"; requires {', '.join(required)}"
    recorded = table.properties.get(SCHEMA_CHANGE_PROP)
    if not recorded:
        return line + "; unchanged since the table was made"
    last = json.loads(recorded)
    return line + f"; last change {last['at']}: {last['change']}"


def _needs_change(current: pa.Schema, columns: pa.Schema) -> bool:
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


def _optional(schema: pa.Schema) -> pa.Schema:
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


def registry_columns(cfg: PipelineConfig, table: Table) -> pa.Schema | None:
    """The data table's columns for the executors of a registry format (None for json and raw): the
    fields the table requires (its ``tailfill.required-fields``) not nullable, every other one nullable."""
    if cfg.format.type not in REGISTRY_FORMATS:
        return None
    required = set(json.loads(table.properties.get(REQUIRED_PROP, "[]")))
    return pa.schema([f.with_nullable(f.name not in required) for f in table.schema().as_arrow()])


def follow_files(cfg: PipelineConfig, table: Table, fs: pafs.FileSystem, files: list[str]) -> bool:
    """Before ``files`` (a batch's data files of a registry format) are committed: give ``table`` their
    new columns and promotions. True if the schema changed."""
    if cfg.format.type not in REGISTRY_FORMATS or not files:
        return False
    columns = file_columns(fs, files)
    return columns is not None and evolve(table, columns)


def follow_declared(cfg: PipelineConfig, table: Table) -> bool:
    """Give ``table`` the columns ``format.fields`` declares now (a field added to a json pipeline)."""
    if cfg.format.type != "json":
        return False
    return evolve(table, table_schema(cfg.format.fields, cfg.format.key), "format.fields")
