"""A batch prepared against the table's columns, the table evolved first when its records need new ones.

``format.unknown_fields: evolve``: the executors parse with the data table's columns as the driver hands them.
When a batch's records hold a field the table has no column for (or a struct wider than its column), the tasks
say which columns they want; the driver adds or widens them (earliest offset first,
:func:`~tailfill.formats.evolve.columns_to_add`), deletes the files of that attempt (never committed) and
prepares the batch again with the new columns. The rows a batch commits are therefore a function of its records
and the table's columns, and a batch replayed after a crash, whose table already has the columns, prepares the
same rows in one pass.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.fs as pafs
from pyiceberg.table import Table

from tailfill.errors import SchemaChangeError
from tailfill.formats.evolve import columns_to_add
from tailfill.lake.prepare import PreparedRange
from tailfill.lake.schema_change import evolve, table_columns
from tailfill.plumbing.warehouse import fs_path

MAX_ROUNDS = 4  # a new column, then a wider struct inside it, ...: each round needs the one before


def prepare_evolving(prepare: Callable[[pa.Schema], list[PreparedRange]], table: Table,
                     fs: pafs.FileSystem) -> list[PreparedRange]:
    """``prepare(table's columns)``, again after each change of the table its records want; the last attempt's
    prepared ranges. :class:`SchemaChangeError` if the records still want columns after :data:`MAX_ROUNDS`."""
    prepared = prepare(table_columns(table))
    for _ in range(MAX_ROUNDS):
        wanted = columns_to_add(table_columns(table), [p.drift.wants for p in prepared if p.drift])
        if not len(wanted):
            return prepared
        evolve(table, wanted, "the records")
        discard(fs, prepared)
        prepared = prepare(table_columns(table))
    raise SchemaChangeError(f"the records of a batch still want new columns in {table.name()[-1]} after "
                            f"{MAX_ROUNDS} schema changes")


def discard(fs: pafs.FileSystem, prepared: list[PreparedRange]) -> None:
    """Delete the files of prepared ranges that will not be committed."""
    for p in prepared:
        for uri in p.files:
            fs.delete_file(fs_path(uri))
