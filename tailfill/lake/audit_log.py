"""The durable audit record: every batch's summary, durable when its commit is, whoever expires snapshots.

Each data commit's snapshot summary is the audit of one micro-batch (pipeline, run, batch, ranges,
lost ranges, records read, the offsets the broker did not deliver and the isolation level that says why).
Snapshots are expired and files compacted by Tailfill's ``maintain`` and also by other tools (pyiceberg's
``expire_snapshots``, a managed catalog's own upkeep), so the summary cannot be the only copy:

- **With the commit.** :func:`tailfill.lake.ledger.commit_batch` writes the summary as one object,
  ``batches/<snapshot id>.json``, *before* the transaction that makes that snapshot commits, and the
  same transaction sets the table property :data:`AUDIT_HEAD` to that snapshot id; each summary names
  the head it replaced (``tailfill.previous-audit``). The committed batches are exactly the chain from
  the table's head back through those links: an object of an attempt whose commit failed is never on
  it, whatever happened to the process.
- **Archived.** Tailfill's own expiry also writes the summaries of the snapshots it expires as one
  JSON-lines object, then drops their per-commit objects (one object instead of many to list).

Objects live in the pipeline's shared state (``<state root>/audit/<namespace>.<table>/``), not under
the table's location: an S3 Tables bucket refuses other objects there, and another tool's orphan
cleanup would delete them. Archives written beside the table by earlier versions
(``<table location>/tailfill-audit/``) are still read. Writes are whole objects (a reader never sees
half of one); readers keep one summary per snapshot id. :func:`all_batch_summaries` is what the proof
reads.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow.fs as pafs
from pyiceberg.table import Table

from tailfill.lake.batch_summary import BatchSummary
from tailfill.lake.ledger import AUDIT_HEAD, PREVIOUS_AUDIT, batch_summaries
from tailfill.plumbing.durable import write_whole
from tailfill.plumbing.warehouse import fs_path, make_dirs
from tailfill.state.store import StateStore

LEGACY_AUDIT_DIR = "tailfill-audit"  # beside the table's data: where archives were written before
READERS = 8


@dataclass(frozen=True)
class AuditLog:
    """One table's audit objects under ``base`` (``<state root>/audit/<namespace>.<table>``)."""

    fs: pafs.FileSystem
    base: str
    legacy: str | None = None  # the table's old archive folder, read only

    @property
    def batches_folder(self) -> str:
        return batches_folder(self.base)

    def batch_uri(self, snapshot_id: int) -> str:
        return f"{self.batches_folder}/{snapshot_id}.json"

    def write_batch(self, snapshot_id: int, summary: dict[str, str]) -> None:
        """The summary of the commit about to make ``snapshot_id``: written before that commit."""
        make_dirs(self.fs, self.batches_folder)
        record = {**summary, "snapshot-id": str(snapshot_id), "timestamp-ms": str(int(time.time() * 1000))}
        write_whole(self.batch_uri(snapshot_id), json.dumps(record, sort_keys=True).encode(), self.fs)

    def drop_batches(self, snapshot_ids: list[int]) -> None:
        """Delete per-commit objects (of a failed attempt, or once archived); absent ones are fine."""
        for sid in snapshot_ids:
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(fs_path(self.batch_uri(sid)))

    def batches(self) -> dict[str, dict[str, str]]:
        """Every per-commit summary by snapshot id, committed or not (see :func:`all_batch_summaries`)."""
        infos = [i for i in self._list(self.batches_folder) if i.base_name.endswith(".json")]
        with ThreadPoolExecutor(max_workers=READERS) as pool:
            texts = list(pool.map(self._read, [i.path for i in infos]))
        out = {}
        for text in texts:
            if text is not None:
                record = json.loads(text)
                out[record["snapshot-id"]] = record
        return out

    def archive(self, summaries: list[dict[str, str]]) -> str | None:
        """Write ``summaries`` as one new JSON-lines object; returns its URI (None if empty)."""
        if not summaries:
            return None
        make_dirs(self.fs, f"{self.base}/archive")
        name = f"{datetime.now(UTC):%Y%m%dT%H%M%S%f}-{uuid.uuid4().hex[:12]}.jsonl"
        final = f"{self.base}/archive/{name}"
        write_whole(final, "".join(json.dumps(s, sort_keys=True) + "\n" for s in summaries).encode(), self.fs)
        return final

    def archived(self) -> list[dict[str, str]]:
        """The archived summaries, the old location's first, each folder's oldest object first."""
        out = []
        for folder in [*([self.legacy] if self.legacy else []), f"{self.base}/archive"]:
            infos = sorted((i for i in self._list(folder) if i.base_name.endswith(".jsonl")), key=lambda i: i.base_name)
            for info in infos:
                text = self._read(info.path) or ""
                out += [json.loads(line) for line in text.splitlines() if line.strip()]
        return out

    def _list(self, uri: str) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(pafs.FileSelector(fs_path(uri), allow_not_found=True))

    def _read(self, path: str) -> str | None:
        try:
            with self.fs.open_input_stream(path) as f:
                return f.read().decode()
        except FileNotFoundError:  # archived and dropped meanwhile: the archive has it
            return None


def audit_log(store: StateStore, table: Table) -> AuditLog:
    """The audit log of ``table`` in its pipeline's shared state folder (``store``)."""
    return AuditLog(store.fs, audit_folder(store.root, ".".join(table.name())),
                    f"{table.location().rstrip('/')}/{LEGACY_AUDIT_DIR}")


def audit_folder(root: str, table: str) -> str:
    """The audit folder of ``table`` (``<namespace>.<name>``) in the pipeline's state folder ``root``: known from the
    config alone, before the table exists."""
    return f"{root}/audit/{table}"


def batches_folder(base: str) -> str:
    """Where each commit's summary is written in the audit folder ``base`` (a place a run's write test tries)."""
    return f"{base}/batches"


def all_batch_summaries(log: AuditLog, table: Table) -> list[dict[str, str]]:
    """Every batch summary of ``table``, one per snapshot id, oldest first: archived, live, and the
    per-commit ones on the chain from the table's :data:`AUDIT_HEAD` (an attempt that never committed
    is not on it)."""
    trusted = [*log.archived(), *batch_summaries(table)]
    known = {s["snapshot-id"]: s for s in trusted}
    per_commit = log.batches()
    chain, head = [], table.properties.get(AUDIT_HEAD)
    while head and head not in {s["snapshot-id"] for s in chain}:
        record = known.get(head) or per_commit.get(head)
        if record is None:
            break
        chain.append(record)
        head = record.get(PREVIOUS_AUDIT)
    seen: set[str] = set()
    out = []
    for s in [*trusted, *reversed(chain)]:
        if s["snapshot-id"] not in seen and BatchSummary.recorded_in(s):
            seen.add(s["snapshot-id"])
            out.append(s)
    return sorted(out, key=_commit_order)


def _commit_order(summary: dict[str, str]) -> int:
    return int(summary.get("timestamp-ms", 0))
