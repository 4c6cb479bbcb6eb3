"""What the three loops of one streaming query share, and nothing more.

The batch handler (``foreachBatch``, :mod:`tailfill.run.batch`) writes it, the poll loop
(:mod:`tailfill.run.poll`) and the restart loop (:mod:`tailfill.run.spark_ingest`) read it: how far the
query got (:class:`Tally`, a value replaced after each batch), the step the handler is at and the
failure it saw, the flag that tells the pacer the query is stopping, the times the next batch's
stages are measured from, and what the batch in flight has read so far. What belongs to one loop
alone (the restarts so far, when progress was last printed) stays in that loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tailfill.run.contract import IngestResult
from tailfill.run.restarts import Failure
from tailfill.source.read_counts import BatchReads, InBatch
from tailfill.state.records import BatchReport
from tailfill.values.drift import unknown_in
from tailfill.values.freshness import LatencySample, freshness


@dataclass(frozen=True)
class Tally:
    """What one query (with the earlier tries of its run) committed so far."""

    batches: int = 0
    offsets: int = 0
    rows: int = 0
    quarantined: int = 0
    skipped_offsets: int = 0
    stages: Mapping[str, float] = field(default_factory=dict)  # seconds by stage, summed over the batches
    last: BatchReport | None = None
    latencies: LatencySample = field(default_factory=lambda: LatencySample((), ()))  # merged batch by batch
    unknown_fields: Mapping[str, list[int]] = field(default_factory=dict)  # JSON fields not declared (Drift.unknown)

    def after(self, report: BatchReport, sample: LatencySample | None = None) -> Tally:
        """This tally with ``report`` (and its records' latency ``sample``) counted."""
        stages = dict(self.stages)
        for stage, secs in report.stages.items():
            stages[stage] = round(stages.get(stage, 0.0) + secs, 3)
        return replace(self, batches=self.batches + 1, offsets=self.offsets + report.offsets,
                       rows=self.rows + report.rows, quarantined=self.quarantined + report.quarantined,
                       skipped_offsets=self.skipped_offsets + (report.offsets if not report.committed else 0),
                       stages=stages, last=report,
                       unknown_fields=unknown_in([self.unknown_fields, report.unknown_fields]),
                       latencies=LatencySample.merged([self.latencies, sample]) if sample else self.latencies)

    def result(self, run_id: str, label: str) -> IngestResult:
        """The query's part of the job's result (restarts, time and warnings are the restart loop's to add)."""
        fresh = freshness([self.latencies])
        return IngestResult(run_id, label, self.batches, self.offsets, self.rows, self.quarantined,
                            self.skipped_offsets, stages=dict(self.stages),
                            freshness=fresh.to_dict() if fresh else None, unknown_fields=dict(self.unknown_fields))


class QueryState:
    """The state one query's handler, poll loop and restart loop share."""

    def __init__(self, tally: Tally):
        self.tally = tally
        self.step = "starting"  # where the handler is, for the restart policy
        self.failure: Failure | None = None  # what the handler caught in this attempt, as data
        self.stopping = threading.Event()  # the query is being stopped: the pacer waits no longer
        self.last_end = time.time()  # when the last batch ended (the next one's planning starts there)
        self.pending_yield = 0.0  # the pacer's wait after the last batch, counted in the next batch's stages
        self.reads: BatchReads | None = None  # the read counters of the batch in flight, where its handler runs
        self.published: InBatch | None = None  # over Connect: what the server's handler last said it read
        self.note: str | None = None  # over Connect: the server's pacer's note (None: none published yet)
        self._failed: tuple[str, int] | None = None  # the last attempt's failure, and the batches committed then

    def in_batch(self) -> InBatch | None:
        """What the batch in flight has read so far, not committed yet (None between batches). Its handler
        forgets the batch before it counts its commit in :attr:`tally`: read ``tally`` first, then this."""
        reads = self.reads
        return reads.now() if reads is not None else self.published

    def failed(self, cause: str) -> None:
        """An attempt failed with ``cause``: the query is stalled until a batch commits again."""
        self._failed = (cause, self.tally.batches)

    def stalled(self) -> str | None:
        """The cause of the last failure while no batch has committed since it, else None."""
        failed = self._failed
        return failed[0] if failed is not None and failed[1] == self.tally.batches else None

    def new_attempt(self) -> None:
        """A new attempt of the query starts: the failure of the last one is the restart loop's now."""
        self.failure = None
