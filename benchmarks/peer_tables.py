"""What landed in each peer's table, read independently of the system that wrote it.

An Iceberg table is read with pyiceberg from its SQL catalog (a SQLite file: Tailfill's own, or the one Iceberg's
JdbcCatalog wrote for Spark or Kafka Connect); Spark's Parquet file sink is read as Spark reads it, through the
files its ``_spark_metadata`` log committed (a file a killed batch left behind is not in the table). Each table is
counted by the events' unique ``event_id``: rows, distinct ids, and so duplicates and losses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ID = "event_id"
TIMESTAMP = "kafka_timestamp"  # every system's rows keep the record's Kafka timestamp in this column


@dataclass(frozen=True)
class Landed:
    """A table's rows against the ``expected`` distinct events of the topic."""

    rows: int
    distinct: int
    expected: int

    @property
    def duplicates(self) -> int:
        return self.rows - self.distinct

    @property
    def lost(self) -> int:
        return self.expected - self.distinct


def landed(ids: pa.ChunkedArray | pa.Array, expected: int) -> Landed:
    """Count ``ids`` (a table's ``event_id`` column) against ``expected`` distinct events."""
    return Landed(len(ids), pc.count_distinct(ids, mode="only_valid").as_py(), expected)


def catalog(db: Path, name: str, warehouse: Path):
    """pyiceberg's SQL catalog on the SQLite file ``db`` (catalog ``name``, as the writer named it)."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(name, uri=f"sqlite:///{db}", warehouse=f"file://{warehouse}")


def iceberg_ids(db: Path, name: str, warehouse: Path, identifier: str) -> pa.ChunkedArray:
    """The ``event_id`` column of Iceberg table ``identifier`` as its current snapshot holds it (empty when the
    table does not exist yet)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = catalog(db, name, warehouse).load_table(identifier)
    except NoSuchTableError:
        return pa.chunked_array([], pa.string())
    return table.scan(selected_fields=(ID,)).to_arrow()[ID]


def iceberg_records(db: Path, name: str, warehouse: Path, identifier: str) -> tuple[int, int] | None:
    """(records, commit time in epoch ms) of the table's current snapshot from its metadata alone; None while it
    has none. For waiting on a writer that never exits, not for counting."""
    from pyiceberg.exceptions import NoSuchTableError

    if not db.exists():
        return None
    try:
        snapshot = catalog(db, name, warehouse).load_table(identifier).current_snapshot()
    except NoSuchTableError:
        return None
    if snapshot is None or snapshot.summary is None:
        return None
    return int(snapshot.summary["total-records"]), snapshot.timestamp_ms


def iceberg_property(db: Path, name: str, warehouse: Path, identifier: str, key: str) -> str | None:
    """Table property ``key`` of Iceberg table ``identifier``; None while the table or the property is absent."""
    from pyiceberg.exceptions import NoSuchTableError

    if not db.exists():
        return None
    try:
        return catalog(db, name, warehouse).load_table(identifier).properties.get(key)
    except NoSuchTableError:
        return None


def committed_files(table: Path) -> dict[Path, int]:
    """The data files Spark's file sink committed to ``table``, each with its commit time (epoch ms: when the
    batch's log file that first lists it was written): every ``add`` in its ``_spark_metadata`` log (numbered
    batch files, and ``N.compact`` files that repeat the batches before them)."""
    files: dict[Path, int] = {}
    log = table / "_spark_metadata"
    entries = [e for e in log.iterdir() if e.name.split(".")[0].isdigit() and not e.name.endswith(".tmp")] \
        if log.is_dir() else []
    for entry in sorted(entries, key=lambda e: int(e.name.split(".")[0])):
        lines = entry.read_text().splitlines()
        if not lines or not lines[0].startswith("v"):
            raise ValueError(f"{entry}: not a file sink log entry (first line {lines[:1]})")
        for line in lines[1:]:
            record = json.loads(line)
            if record.get("action", "add") == "add":
                files.setdefault(Path(unquote(urlparse(record["path"]).path)), int(entry.stat().st_mtime * 1000))
    return files


def parquet_sink_ids(table: Path) -> pa.ChunkedArray:
    """The ``event_id`` column of the files Spark's file sink committed to ``table``."""
    files = committed_files(table)
    return pa.chunked_array([c for f in sorted(files) for c in pq.read_table(f, columns=[ID])[ID].chunks],
                            pa.string())


def iceberg_file_commits(db: Path, name: str, warehouse: Path, identifier: str) -> dict[Path, int]:
    """Each live data file of an Iceberg table with the commit time (epoch ms) of the snapshot that added it."""
    table = catalog(db, name, warehouse).load_table(identifier)
    if table.current_snapshot() is None:
        return {}
    when = {s.snapshot_id: s.timestamp_ms for s in table.metadata.snapshots}
    entries = table.inspect.entries().select(["status", "snapshot_id", "data_file"]).to_pylist()
    return {Path(unquote(urlparse(e["data_file"]["file_path"]).path)): when[e["snapshot_id"]]
            for e in entries if e["status"] != 2}  # 2: deleted


def commit_latencies(files: dict[Path, int], since_ms: int) -> list[float]:
    """Seconds from each row's Kafka timestamp to the commit of its file, for rows produced at or after
    ``since_ms`` (epoch ms)."""
    out: list[float] = []
    for path, committed in files.items():
        ts = pq.read_table(path, columns=[TIMESTAMP])[TIMESTAMP]
        ms = pc.cast(pc.cast(ts, pa.timestamp("ms", tz=ts.type.tz)), pa.int64()).to_pylist()
        out += [(committed - t) / 1000 for t in ms if t is not None and t >= since_ms]
    return out
