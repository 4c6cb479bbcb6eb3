"""Records read by a micro-batch still in flight: counters its tasks write, the driver sums.

A batch commits only at its end; until then the records its tasks have read are the only sign that it
moves. Each task of a batch (:func:`tailfill.run.spark_prepare.prepare_batch`) counts what it reads
(:class:`ReadCounter`: one small file, replaced whole at most once a second and at the task's end) in the
request's checkpoint folder, named by run id, batch id, the batch's attempt and the task's first range.
The driver sums the files of the attempt it runs (:meth:`BatchReads.now`). A replayed batch is a new
attempt, so an interrupted one's counts never mix in; the driver removes the attempt's files after it.

The counts reach the driver where its executors share its host (local mode, a standalone cluster on one
machine, this home's Spark Connect server); elsewhere none arrives and progress shows commits alone.
They are records read, not committed: shown apart from the committed offsets, never added to them, and
never more than the offsets the task was given.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from tailfill.errors import DiskFullError
from tailfill.offsets import OffsetRange
from tailfill.plumbing.durable import write_whole

READS_DIR = "tailfill-reads"  # in the request's checkpoint folder
WRITE_EVERY_S = 1.0


@dataclass(frozen=True)
class InBatch:
    """What the batch in flight has read so far (records, not committed)."""

    batch_id: int
    read: int


def merged(counts: Iterable[str]) -> int:
    """The records read by a batch's tasks, from their counter files' texts (``"<read> <planned>"``), each at
    most what its task was given; a text that is not a count (none is written) counts nothing."""
    out = 0
    for text in counts:
        try:
            read, planned = (int(v) for v in text.split())
        except ValueError:
            continue
        out += max(min(read, planned), 0)
    return out


@dataclass(frozen=True)
class BatchReads:
    """The read counters of one attempt of one batch: where its tasks write them, and their sum."""

    folder: Path
    run_id: str
    batch_id: int
    attempt: str

    @classmethod
    def start(cls, folder: Path, run_id: str, batch_id: int) -> BatchReads:
        """A new attempt of batch ``batch_id``: counters of its own (``folder`` made absolute: a task's working
        folder is not the driver's)."""
        return cls(folder.absolute(), run_id, batch_id, uuid.uuid4().hex[:12])

    @property
    def prefix(self) -> str:
        return f"{self.run_id}.{self.batch_id}.{self.attempt}."

    def counter(self, ranges: Sequence[OffsetRange]) -> ReadCounter:
        """The counter of the task that reads ``ranges`` (no two tasks of a batch share a first range; Kafka's topic
        names are safe in a file name)."""
        first = ranges[0]
        return ReadCounter(self.folder / f"{self.prefix}{first.topic}-{first.partition}-{first.start}",
                           sum(r.size for r in ranges))

    def _files(self) -> list[Path]:
        try:
            return [Path(e.path) for e in os.scandir(self.folder) if e.name.startswith(self.prefix)]
        except FileNotFoundError:
            return []

    def now(self) -> InBatch:
        """What the attempt's tasks have read so far."""
        texts = []
        for path in self._files():
            try:
                texts.append(path.read_text())
            except FileNotFoundError:  # removed meanwhile: the batch has ended
                continue
        return InBatch(self.batch_id, merged(texts))

    def clear(self) -> None:
        """Remove the attempt's counters (its batch has ended)."""
        for path in self._files():
            path.unlink(missing_ok=True)


class ReadCounter:
    """One task's count of records read, written to ``path`` as ``"<read> <planned>"`` at most every ``every_s``
    seconds, and at the end. A counter that cannot be written says so once and stops (the batch goes on)."""

    def __init__(self, path: Path, planned: int, every_s: float = WRITE_EVERY_S,
                 clock: Callable[[], float] = time.monotonic):
        self.path: Path | None = path
        self.planned, self.every_s, self.clock = planned, every_s, clock
        self.read = 0
        self.written_at: float | None = None

    def counted(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches`` (records of :data:`~tailfill.values.schema.RAW_SCHEMA`, then range markers), counted."""
        for batch in batches:
            if batch.column("range_marker").null_count:  # records; a marker row has its marker set
                self.add(batch.num_rows)
            yield batch
        self.write()

    def add(self, records: int) -> None:
        self.read += records
        if self.written_at is None or self.clock() - self.written_at >= self.every_s:
            self.write()

    def write(self) -> None:
        if self.path is None:
            return
        self.written_at = self.clock()
        try:
            write_whole(self.path, f"{min(self.read, self.planned)} {self.planned}")
        except (OSError, DiskFullError) as exc:  # a count is for the progress line: it never fails the task
            print(f"progress within the batch is not shown: cannot write {self.path} ({exc})", file=sys.stderr)
            self.path = None
