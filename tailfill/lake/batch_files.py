"""A batch's data files on a partitioned table: at most one per table partition, up to the target file size.

Each task of a batch writes one file per table partition it touched (:class:`tailfill.lake.prepare.PartitionFiles`);
a batch of several tasks so has several small files of one partition. Before the commit, the driver merges the
files of each partition into one while together they stay under the target size, so that a batch spanning a year
of days adds one file per day, not one per day and task. The merged file keeps the partition recorded in its
footer; the files it replaces were never committed and are deleted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.table import Table

from tailfill.lake.files import PARQUET_OPTIONS, new_file_uri
from tailfill.lake.partition import FOOTER_KEY
from tailfill.lake.prepare import PreparedRange
from tailfill.plumbing.disk import naming_full_disk
from tailfill.plumbing.warehouse import fs_path, make_dirs

DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024  # without a maintenance block: a batch's files merge up to this size
MERGERS = 8  # partitions merged at once (their files are small: the work is waiting on the filesystem)


def one_per_partition(fs: pafs.FileSystem, prepared: Sequence[PreparedRange], location: str, run_id: str,
                      target_bytes: int = DEFAULT_TARGET_FILE_BYTES) -> list[PreparedRange]:
    """``prepared`` with the data files of each table partition merged into one new file (named by ``run_id``,
    under ``location``) where there are several that together stay under ``target_bytes``; each merged file is
    listed with the range that listed the first of its files."""
    files = [f for p in prepared for f in p.data_files]
    tasks = sum(1 for p in prepared if p.stages)  # a task's first range carries its time by stage
    if len(files) < 2 or tasks < 2:  # one task wrote one file per partition already
        return list(prepared)
    with ThreadPoolExecutor(max_workers=MERGERS) as pool:
        groups = _by_partition(fs, files, target_bytes, pool)
        if groups:
            make_dirs(fs, f"{location.rstrip('/')}/data")
            merged = list(pool.map(lambda group: _merge(fs, group, location, run_id), groups))
    if not groups:
        return list(prepared)
    becomes: dict[str, str | None] = {}
    for group, uri in zip(groups, merged, strict=True):
        becomes.update(dict.fromkeys(group, None))
        becomes[group[0]] = uri
    out = [replace(p, data_files=[becomes.get(f, f) for f in p.data_files if becomes.get(f, f) is not None])
           for p in prepared]
    with ThreadPoolExecutor(max_workers=MERGERS) as pool:  # never committed: nothing else refers to them
        list(pool.map(lambda uri: fs.delete_file(fs_path(uri)), becomes))
    return out


def partitions_added(table: Table, snapshot_id: int | None) -> int | None:
    """The table partitions a batch's snapshot added files to (0 with no file; None: no such snapshot)."""
    snapshot = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    if snapshot is None or snapshot.summary is None:
        return None
    props = snapshot.summary.additional_properties
    if not int(props.get("added-data-files", 0)):
        return 0
    return int(props.get("changed-partition-count", 1))  # unpartitioned: one partition, not counted there


def _by_partition(fs: pafs.FileSystem, files: list[str], target_bytes: int,
                  pool: ThreadPoolExecutor) -> list[list[str]]:
    """The groups of ``files`` worth merging: two or more of one partition (and one schema), under the target."""
    sizes = [info.size for info in fs.get_file_info([fs_path(f) for f in files])]
    schemas = list(pool.map(lambda uri: pq.read_schema(fs_path(uri), filesystem=fs), files))
    groups: dict[tuple, list[tuple[str, int]]] = defaultdict(list)
    for uri, size, schema in zip(files, sizes, schemas, strict=True):
        partition = (schema.metadata or {}).get(FOOTER_KEY)
        if partition is not None:
            groups[(partition, schema.remove_metadata())].append((uri, size))
    return [[uri for uri, _ in group] for group in groups.values()
            if len(group) > 1 and sum(size for _, size in group) <= target_bytes]


def _merge(fs: pafs.FileSystem, group: list[str], location: str, run_id: str) -> str:
    """One new file holding the rows of ``group`` (one partition's files, in order), its footer kept."""
    rows = pa.concat_tables([pq.read_table(fs_path(uri), filesystem=fs) for uri in group])
    uri = new_file_uri(location, run_id)
    with naming_full_disk("a data file", uri):
        pq.write_table(rows, fs_path(uri), filesystem=fs, **PARQUET_OPTIONS)
    return uri
