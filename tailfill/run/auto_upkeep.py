"""The tail's own upkeep: when a pipeline has no ``maintenance:`` block, a running tail keeps its tables up itself.

Once ``tail.upkeep_every_seconds`` have passed (null: never) since the data table's last compaction (or its first
commit), whether in this tail run or an earlier one, a tail starts an upkeep between two batches: a background
thread compacts both tables' small files and expires old snapshots (their batch audit archived first) with
:data:`AUTO_UPKEEP`, the documented defaults; orphan cleanup is left to an explicit ``maintenance:`` block, whose
settings and schedule (``tailfill maintain``, the maintenance DAG) govern instead. Upkeep commits through the same
optimistic concurrency as any writer, so the tail's batches go on meanwhile; at most one upkeep runs at a time. Its
outcome, or its failure with the cause, is one line in the tail's log; a failed upkeep is tried again when the next
one is due.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tailfill.config import MaintenanceConfig, PipelineConfig
from tailfill.errors import ErrorInfo
from tailfill.lake.batch_files import DEFAULT_TARGET_FILE_BYTES
from tailfill.lake.ledger import MAINTENANCE_SUMMARY
from tailfill.pipeline.handle import Pipeline
from tailfill.run.maintain import maintain

AUTO_UPKEEP = MaintenanceConfig(target_file_bytes=DEFAULT_TARGET_FILE_BYTES, expire_older_than="1d", keep_last=100,
                                orphan_min_age="3d", schedule=None)  # orphan_min_age unused: no orphan cleanup


def upkeep_interval(cfg: PipelineConfig) -> float | None:
    """How often the tail keeps its tables up itself (None: never; a ``maintenance:`` block governs instead)."""
    return None if cfg.maintenance is not None else cfg.tail.upkeep_every_seconds


class TailUpkeep:
    """A tail's own upkeep, started between batches once it is due (:func:`upkeep_interval` after the last)."""

    def __init__(self, pipeline: Pipeline, log: Callable[[str], None], clock: Callable[[], float] = time.time):
        self.pipeline, self.log, self.clock = pipeline, log, clock
        self.every = upkeep_interval(pipeline.cfg)
        self.last: float | None = None  # when the last upkeep began (unix seconds), once read from the table
        self.thread: threading.Thread | None = None

    def after_batch(self) -> None:
        """Start an upkeep in the background if one is due and none is running."""
        if self.every is None or self.running:
            return
        if self.last is None:
            self.last = self._last_compaction()
        if self.last is not None and self.clock() - self.last < self.every:
            return
        self.last = self.clock()
        self.thread = threading.Thread(target=self._run, name="tail-upkeep", daemon=True)
        self.thread.start()

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def wait(self, timeout: float | None = None) -> None:
        """Let a running upkeep finish (the tail is stopping)."""
        if self.thread is not None:
            self.thread.join(timeout)

    def _last_compaction(self) -> float | None:
        """When the data table was last compacted, or first committed to (None: no table, no snapshot yet)."""
        tables = self.pipeline.open_tables()
        snapshots = tables.data.snapshots() if tables is not None else []
        compacted = [s.timestamp_ms for s in snapshots
                     if s.summary is not None and s.summary.additional_properties.get(MAINTENANCE_SUMMARY)]
        stamps = compacted or [s.timestamp_ms for s in snapshots[:1]]
        return max(stamps) / 1000 if stamps else None

    def _run(self) -> None:
        try:
            result = maintain(self.pipeline, AUTO_UPKEEP, orphans=False)
        except Exception as exc:  # the tail goes on; the cause is said, and the next upkeep tries again
            error = ErrorInfo.of(exc)
            self.log(f"WARNING: the tail's upkeep failed (tried again in {self.every:g}s): {error.error_class}: "
                     f"{error.message.splitlines()[0] if error.message else ''}")
            return
        for t in result.tables:
            c, e = t.compaction, t.expiry
            self.log(f"upkeep of {t.table}: compacted {c.files_removed} files into {c.files_added} "
                     f"({c.data_files} data files now); expired {e.expired} snapshots ({e.archived} batch audits "
                     f"archived)")
