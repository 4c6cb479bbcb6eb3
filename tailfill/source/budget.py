"""The next micro-batch's read limit: what the driver's writer hands the source before each batch.

The writer (``foreachBatch``, on the driver) decides after each commit how large the next batch may
be and on how many tasks (the tail's pace, the backfill's governor); the source reads it when Spark
plans that batch (``latestOffset``), in another Python process. The hand-off is one small file,
replaced in one rename, so the source never reads half of it — like Spark's own typed
``ReadLimit`` values, one type on both sides instead of a dictionary passed through a file.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

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
