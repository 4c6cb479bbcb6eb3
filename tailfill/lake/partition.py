"""The table's partition spec (``target.partition_by``, see :mod:`tailfill.values.partition_terms`), applied
where rows are written. Executors compute each row's partition values from the config alone (no catalog),
write one file set per partition value, and record the values (and the spec they follow) in each Parquet
file's footer; the driver builds the files' Iceberg entries from that footer (:mod:`tailfill.lake.data_files`).

Executors import this module: it needs pyarrow only, not pyiceberg's Arrow I/O (about half a second of
imports in every Python worker Spark starts).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from tailfill.values.partition_terms import PartitionTerm

FOOTER_KEY = b"tailfill.partition"  # JSON {"spec": [...], "values": [...]} in a data file's Parquet footer


def split(table: pa.Table, terms: Sequence[PartitionTerm]) -> Iterator[tuple[tuple, pa.Table]]:
    """``table``'s rows grouped by partition value: (values, rows) once per distinct value."""
    if not terms or table.num_rows == 0:
        if table.num_rows:
            yield (), table
        return
    keys = pa.table({f"_p{i}": t.values_in(table) for i, t in enumerate(terms)})
    names = keys.column_names
    if keys.num_rows and all(pc.count_distinct(keys[n], mode="all").as_py() == 1 for n in names):
        yield tuple(keys[n][0].as_py() for n in names), table  # the common case: one partition
        return
    for combo in keys.group_by(names).aggregate([]).to_pylist():
        mask = None
        for n in names:
            term = pc.is_null(keys[n]) if combo[n] is None else pc.equal(keys[n], combo[n])
            mask = term if mask is None else pc.and_(mask, term)
        yield tuple(combo[n] for n in names), table.filter(mask)


def footer(terms: Sequence[PartitionTerm], values: tuple) -> dict[bytes, bytes]:
    """The Parquet footer metadata recording a file's partition (empty when unpartitioned)."""
    if not terms:
        return {}
    return {FOOTER_KEY: json.dumps({"spec": [str(t) for t in terms], "values": list(values)}).encode()}
