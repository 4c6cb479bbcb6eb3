"""What the driver's writer and the source hand each other between batches, through small files.

The writer (``foreachBatch``, on the driver) decides after each commit how large the next batch may
be and on how many tasks (the tail's pace, the backfill's governor); the source reads it when Spark
plans that batch (``latestOffset``), in another Python process: a :class:`Budget`, like Spark's own
typed ``ReadLimit`` values. The other way, a failure of the source's planning (an offset expired, the
broker unreachable) is handed to the writer's restart policy as data (:func:`report_failure`): the
JVM passes only its text on. Each file is replaced whole, so neither side reads half of one.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from tailfill.errors import ErrorInfo
from tailfill.plumbing.durable import write_whole


@dataclass(frozen=True)
class Budget:
    """The next batch: at most ``max_offsets`` offsets in at most ``tasks`` tasks (None: all cores)."""

    max_offsets: int
    tasks: int | None = None

    def write(self, path: Path) -> None:
        """Hand this budget to the source (atomically)."""
        write_whole(path, json.dumps(asdict(self)))

    @classmethod
    def read(cls, path: Path | None) -> Budget | None:
        """The budget the writer last handed over, or None if there is none (yet)."""
        if path is None:
            return None
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            return None

    def within(self, max_offsets: int | None, tasks: int | None) -> tuple[int, int | None]:
        """(cap, tasks) of this budget, bounded by the source's own options (None: no bound)."""
        cap = min(self.max_offsets, max_offsets) if max_offsets else self.max_offsets
        count = min(self.tasks, tasks) if self.tasks and tasks else tasks
        return cap, count


def report_failure(path: Path | None, error: ErrorInfo) -> None:
    """The source's side: its planning failed with ``error`` (written for the writer to read)."""
    if path is not None:
        write_whole(path, json.dumps(error.to_dict()))


def reported_failure(path: Path) -> ErrorInfo | None:
    """The writer's side: the failure the source reported since the file was last taken, taken now (or None)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    path.unlink(missing_ok=True)
    return ErrorInfo.from_dict(json.loads(text))
