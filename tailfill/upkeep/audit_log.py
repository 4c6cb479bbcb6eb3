"""The durable audit record: per-batch summaries carried out of snapshots before they expire.

Each data commit's snapshot summary is the audit of one micro-batch (pipeline, run, batch, ranges,
lost ranges, records read). Expiring a snapshot would erase it, so maintenance first writes the
summaries of the snapshots it is about to expire as one JSON-lines object under
``<table location>/tailfill-audit/`` (written to a hidden temporary name, then moved into place, so
a reader never sees half a file), and only then expires them. The objects are append-only: a crash
between writing and expiring, or two maintenance runs at once, leaves a summary in two places,
and readers keep one per snapshot id. :func:`all_batch_summaries` is what the proof reads.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pyarrow.fs as pafs
from pyiceberg.table import Table

from tailfill.lake.ledger import batch_summaries
from tailfill.lake.storage import fs_path, make_dirs, write_whole

AUDIT_DIR = "tailfill-audit"


def audit_uri(table: Table) -> str:
    """Where a table's archived batch summaries live: beside its data and metadata."""
    return f"{table.location().rstrip('/')}/{AUDIT_DIR}"


def archive_summaries(fs: pafs.FileSystem, table: Table, summaries: list[dict[str, str]]) -> str | None:
    """Write ``summaries`` as one new JSON-lines object beside ``table``; returns its URI (None if empty)."""
    if not summaries:
        return None
    base = audit_uri(table)
    make_dirs(fs, base)
    name = f"{datetime.now(UTC):%Y%m%dT%H%M%S%f}-{uuid.uuid4().hex[:12]}.jsonl"
    final = f"{base}/{name}"
    write_whole(fs, final, "".join(json.dumps(s, sort_keys=True) + "\n" for s in summaries).encode())
    return final


def archived_summaries(fs: pafs.FileSystem, table: Table) -> list[dict[str, str]]:
    """The summaries archived beside ``table``, oldest object first."""
    infos = fs.get_file_info(pafs.FileSelector(fs_path(audit_uri(table)), allow_not_found=True))
    out = []
    for info in sorted((i for i in infos if i.base_name.endswith(".jsonl")), key=lambda i: i.base_name):
        with fs.open_input_stream(info.path) as f:
            out += [json.loads(line) for line in f.read().decode().splitlines() if line.strip()]
    return out


def all_batch_summaries(fs: pafs.FileSystem, table: Table) -> list[dict[str, str]]:
    """Every batch summary of ``table``, archived and live, one per snapshot id, oldest first."""
    seen: set[str] = set()
    out = []
    for s in [*archived_summaries(fs, table), *batch_summaries(table)]:
        if s["snapshot-id"] not in seen:
            seen.add(s["snapshot-id"])
            out.append(s)
    return out
