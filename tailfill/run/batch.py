"""One micro-batch, start to end: prepare → commit → report → pace. Spark's ``foreachBatch`` of a query.

:class:`BatchHandler` keeps nothing of its own between batches: what it learns goes into the query's
shared :class:`~tailfill.run.query_state.QueryState` (the tally, the step it is at, the failure it met,
as data, and while the batch runs, where its tasks count what they read:
:class:`~tailfill.source.read_counts.BatchReads`), the batch's report into the run's report log, and the next batch's
:class:`~tailfill.source.handoff.Budget` (from the :class:`~tailfill.run.pacing.Pacer`) into the file the
source reads before planning it.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tailfill import failpoints
from tailfill.errors import BatchFailed, CatalogUnreachable, ErrorInfo
from tailfill.lake.batch_files import partitions_added
from tailfill.lake.commit import Committer, catalog_unreachable
from tailfill.lake.evolving import prepare_evolving
from tailfill.lake.prepare import PreparedRange
from tailfill.run.pacing import Pacer
from tailfill.run.plan import IngestRequest
from tailfill.run.query_state import QueryState
from tailfill.run.restarts import Failure
from tailfill.run.spark_prepare import prepare_batch
from tailfill.source.read_counts import READS_DIR, BatchReads
from tailfill.state.records import BatchReport
from tailfill.state.store import ReportLog
from tailfill.values.drift import Drift
from tailfill.values.freshness import LatencySample, freshness

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)
SHORT_FAILURE_CHARS = 500  # Spark's pattern overflowed the stream thread's stack from about 2,000 characters


@dataclass(frozen=True)
class BatchHandler:
    """``foreachBatch`` of one request: what it needs, handed in once; what it changes, in ``state``."""

    req: IngestRequest
    shipped: str  # the pipeline's resolved config, which the executors build their context from
    committer: Committer
    reports: ReportLog
    pacer: Pacer
    budget_file: Path
    state: QueryState

    def __call__(self, ranges: DataFrame, batch_id: int) -> None:
        self.state.step = f"prepare (read, parse, write on the executors) of batch {batch_id}"
        try:
            self._batch(ranges, batch_id)
        except BaseException as exc:  # for the restart policy: where this attempt failed, and why (as data)
            failure = Failure(ErrorInfo.of(exc), self.state.step)
            self.state.failure = failure
            raise short_failure(batch_id, failure, exc, stopping=self.state.stopping.is_set()) from None

    def _batch(self, ranges: DataFrame, batch_id: int) -> None:
        reads = self.state.reads = BatchReads.start(self.req.checkpoint / READS_DIR, self.req.run_id, batch_id)
        try:
            self._counted_batch(ranges, batch_id, reads)
        finally:
            self.state.reads = None
            reads.clear()

    def _counted_batch(self, ranges: DataFrame, batch_id: int, reads: BatchReads) -> None:
        state, tables = self.state, self.committer.tables
        started = time.time()
        triggered = self._triggered_at(started)
        prepared = prepare_evolving(
            lambda columns: prepare_batch(ranges, self.shipped, self.req.run_id, tables.data.location(),
                                          tables.quarantine.location(), columns, reads, pool=self.committer.pipeline),
            tables.data, self.committer.fs)
        if not prepared:
            state.last_end = time.time()
            return  # an empty batch commits nothing and never fails
        shown = ", ".join(str(p.marker.range) for p in prepared[:4]) + (" …" if len(prepared) > 4 else "")
        state.step = f"commit of batch {batch_id} ({shown})"
        stages = {"plan": started - triggered, "prepare": time.time() - started}
        if state.pending_yield:
            stages["yield"] = state.pending_yield
        report, sample = commit_report(self.committer, self.req.run_id, batch_id, prepared, triggered, stages)
        state.step = f"report and sizing after batch {batch_id}"
        self.reports.append(report)
        state.reads = None  # before the commit counts: the poll loop never counts the batch's records twice
        state.tally = state.tally.after(report, sample)
        budget, state.pending_yield = self.pacer.after_batch(report)
        budget.write(self.budget_file)
        state.last_end = time.time()

    def _triggered_at(self, started: float) -> float:
        """When Spark began this batch: processing-time triggers fire on multiples of the interval."""
        if self.req.trigger != "processing_time":
            return self.state.last_end
        interval = self.req.trigger_interval_seconds
        return max(self.state.last_end, math.floor(started / interval) * interval)


def short_failure(batch_id: int, failure: Failure, exc: BaseException, stopping: bool) -> BatchFailed:
    """The error a failed batch raises into Spark: one line of at most :data:`SHORT_FAILURE_CHARS` characters.

    Its traceback goes to the driver's log here, as a warning: the restart policy retries the batch or ends the
    run with its own error, which is the one a caller reads (one line when the query was being stopped: a batch
    interrupted by the stop is replayed by the next run); Spark gets only this line (see
    :class:`~tailfill.errors.BatchFailed`).
    """
    if stopping:
        log.warning("batch %s did not finish: the query was stopped (%s: %s)", batch_id, failure.error.error_class,
                    failure.error.message[:200])
    else:
        log.warning("batch %s failed at %s", batch_id, failure.step, exc_info=exc)
    line = f"batch {batch_id} failed at {failure.step}: {failure.error.error_class}: {failure.error.message}"
    line = " ".join(line.split())
    return BatchFailed(line if len(line) <= SHORT_FAILURE_CHARS else line[:SHORT_FAILURE_CHARS - 1] + "…")


def commit_report(committer: Committer, run_id: str, batch_id: int, prepared: list[PreparedRange],
                  triggered: float, stages: dict[str, float]) -> tuple[BatchReport, LatencySample]:
    """Commit one prepared batch and describe it: its :class:`BatchReport` and its records' latency sample.

    ``stages``: the seconds already spent (plan, prepare, a yield before it); read, parse and write
    come from the executors, commit is measured here.
    """
    failpoints.pause("before-commit", scope=committer.pipeline)
    failpoints.maybe_fail("before-commit", scope=committer.pipeline)
    try:
        result, commit_s = committer.commit(run_id, batch_id, prepared)
    except Exception as exc:
        if not catalog_unreachable(exc):
            raise
        cause = getattr(exc, "orig", None) or exc  # SQLAlchemy's: the driver's own error, without the SQL
        text = (str(cause).strip().splitlines() or [type(cause).__name__])[0][:300]
        raise CatalogUnreachable(f"the catalog of {committer.pipeline} could not be reached to commit batch "
                                 f"{batch_id} ({type(cause).__name__}: {text})") from exc
    failpoints.maybe_fail("after-commit")
    ended = time.time()
    sample = LatencySample.at(ended, [p.timestamps for p in prepared if p.timestamps])
    fresh = freshness([sample])
    stages = dict(stages)
    for stage in ("read", "parse", "write"):
        stages[stage] = sum(p.stages.get(stage, 0.0) for p in prepared)
    stages["commit"] = commit_s
    report = BatchReport(
        batch_id=batch_id, at=ended, seconds=round(ended - triggered, 3),
        offsets=sum(p.marker.range.size for p in prepared), records=sum(p.marker.records for p in prepared),
        rows=sum(p.rows for p in prepared), quarantined=sum(p.quarantined for p in prepared),
        committed=result.committed, skipped=result.skipped, snapshot_id=result.snapshot_id,
        commit_ms=round(commit_s * 1000, 1), stages={k: round(v, 3) for k, v in stages.items()},
        freshness=fresh.to_dict() if fresh else None, changes=committer.merged(),
        unknown_fields=Drift().add_all(p.drift for p in prepared).unknown,
        table_partitions=partitions_added(committer.tables.data, result.snapshot_id))
    return report, sample
