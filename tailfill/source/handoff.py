"""What the driver's writer and the source hand each other between batches, through small files.

The writer (``foreachBatch``, on the driver) decides after each commit how large the next batch may
be and on how many tasks (the tail's pace, the backfill's governor); the source reads it when Spark
plans that batch (``latestOffset``), in another Python process: a :class:`Budget`, like Spark's own
typed ``ReadLimit`` values. The other way, a failure of the source's planning (an offset expired, the
broker unreachable) is handed to the writer's restart policy as data (:func:`report_failure`): the
JVM passes only its text on. Each file is replaced whole, so neither side reads half of one.

A query being stopped plans no more batches (:func:`hold`): its batch in flight ends, the next trigger finds nothing
to read, and the query stops between batches within its interval (a tail that is behind runs its batches back to
back, and would otherwise never be found between two).
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
        """The budget the writer last handed over, or None if there is none (yet); none at all (0 offsets) while the
        query is held (:func:`hold`)."""
        if path is None:
            return None
        if held(path):
            return cls(0)
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            return None

    def within(self, max_offsets: int | None, tasks: int | None) -> tuple[int, int | None]:
        """(cap, tasks) of this budget, bounded by the source's own options (None: no bound)."""
        cap = min(self.max_offsets, max_offsets) if max_offsets else self.max_offsets
        count = min(self.tasks, tasks) if self.tasks and tasks else tasks
        return cap, count


def hold_file(budget: Path) -> Path:
    """The file whose presence holds the query reading ``budget``."""
    return budget.with_name(budget.name + ".hold")


def hold(budget: Path) -> None:
    """The query reading ``budget`` is being stopped: its next batches read nothing (a budget of 0), whatever the
    writer hands over meanwhile, until :func:`release`."""
    write_whole(hold_file(budget), "")


def release(budget: Path) -> None:
    """The query reading ``budget`` plans its batches by it again (a query restarted, or a new request)."""
    hold_file(budget).unlink(missing_ok=True)


def held(budget: Path) -> bool:
    """Whether the query reading ``budget`` is held (:func:`hold`)."""
    return hold_file(budget).exists()


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
