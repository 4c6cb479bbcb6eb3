"""A data table's columns as its records change: new columns added, promotions applied, conflicts named.

The rules are :mod:`tailfill.formats.evolve`'s. Here they change the table: before a batch of a format
whose rows follow their writer schemas commits, the table takes the columns of the batch's files
(:func:`file_columns`); when the planner provisions the tables, a table takes the columns its YAML
declares. The table's last change is recorded in ``tailfill.schema-change`` for ``tailfill status``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from tailfill.errors import SchemaChangeError
from tailfill.formats.evolve import REQUIRED_PROP, conflicts, describe_change, needs_change, optional
from tailfill.lake.transaction import transaction
from tailfill.plumbing.retry import retrying
from tailfill.plumbing.warehouse import fs_path

ATTEMPTS = 5
SCHEMA_CHANGE_PROP = "tailfill.schema-change"  # the last change this module made: {"at", "change"}


def file_columns(fs: pafs.FileSystem, files: list[str]) -> pa.Schema | None:
    """The union of the columns of ``files`` (their Parquet footers), or None without files."""
    schemas = [pq.read_schema(fs_path(f), filesystem=fs) for f in files]
    if not schemas:
        return None
    return pa.unify_schemas([s.remove_metadata() for s in schemas], promote_options="permissive")


def follow_files(table: Table, fs: pafs.FileSystem, files: list[str]) -> None:
    """Before ``files`` (rows that follow their writer schemas) commit: ``table`` takes their columns."""
    columns = file_columns(fs, files)
    if columns is not None:
        evolve(table, columns)


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
    if not needs_change(current, columns):
        return False
    change = describe_change(current, columns)
    with transaction(table) as tx:
        with tx.update_schema() as update:
            update.union_by_name(optional(columns))
        tx.set_properties({SCHEMA_CHANGE_PROP: json.dumps(
            {"at": datetime.now(UTC).isoformat(timespec="seconds"), "change": change})})
    return True


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


def table_columns(table: Table) -> pa.Schema:
    """The data table's columns as the executors check records against them: the fields it requires (its
    ``tailfill.required-fields``) not nullable, every other one nullable."""
    required = set(json.loads(table.properties.get(REQUIRED_PROP, "[]")))
    return pa.schema([f.with_nullable(f.name not in required) for f in table.schema().as_arrow()])
