"""The batch handler of a live tail's query run over Spark Connect, and the client's view of it.

(A bounded request over Connect runs its batch handler in the client: :mod:`tailfill.run.direct_query`.)
Over Connect, ``foreachBatch`` runs in a Python process on the server, not beside the poll loop. So
:class:`RemoteBatch` (pickled to the server, built there on its first batch) makes the query's
:class:`~tailfill.run.batch.BatchHandler` with its own state and pacer from the shipped config, and after
every batch publishes a small record into the session's settings (``tailfill.query.<run>.<query>``):
the step it is at, the latencies of the records committed so far (constant space) and, when a batch
fails, the failure as data. The batch reports go to the run state as
everywhere else; the client (:class:`RemoteQuery`) reads its tally from them.

While a batch runs, the handler's watch thread publishes what its tasks have read so far
(``….reading``, :mod:`tailfill.source.read_counts`), and clears it before the batch's record: the client shows it
apart from the committed offsets and never counts a batch twice. It also publishes the pacer's note whenever it
changes (``….note``: a backfill governor's state, such as rate-limited or paused for the tail, while it waits
between batches), which the client's progress line shows instead of its own pacer's.

A client that stops its query says so first (:meth:`RemoteQuery.ask_stop`, the setting ``….stop``): the
handler's pacer, which may be waiting between batches (a backfill's rate limit, a pause for the tail), watches
for it and ends its wait, so the stop is not held up by it.

A client that goes away without stopping its query (SIGKILL) leaves the query running on the server.
The client therefore renews a lease in the session's settings every second; a batch that finds the lease
not renewed for :data:`LEASE_S` seconds fails at once with :class:`~tailfill.errors.JobCancelled` before
it prepares anything, so nothing past the committed ledger is written and the next run resumes there. A
quiet query (no batch to run) is ended by the server when the session expires.

The server closes a session nobody has talked to for its idle timeout (60 s), shorter than the longest
wait before a restart (120 s after infrastructure failures in a row): the client's waits between attempts
(:meth:`RemoteQuery.wait`) talk to the server every :data:`KEEP_ALIVE_S` seconds, so the restart finds its
session open.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tailfill.errors import ErrorInfo, JobCancelled
from tailfill.run.plan import IngestRequest
from tailfill.run.query_state import QueryState, Tally
from tailfill.run.restarts import Failure
from tailfill.source.read_counts import InBatch
from tailfill.values.freshness import LatencySample

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from tailfill.run.batch import BatchHandler
    from tailfill.run.pacing import Pacer
    from tailfill.state.store import ReportLog

LEASE_S = 20.0  # a batch finding its client's lease older than this (server's clock) is cancelled
KEEP_ALIVE_S = 10.0  # the longest silence of a client waiting to restart: well inside the session's idle timeout
KEY_PREFIX = "tailfill.query."
_UNSEEN = object()  # a record no sync has read yet


def record_key(req: IngestRequest) -> str:
    """The session setting a query's handler publishes into."""
    return f"{KEY_PREFIX}{req.run_id}.{req.name}"


def lease_key(req: IngestRequest) -> str:
    """The session setting the client renews while it watches the query."""
    return f"{record_key(req)}.lease"


def reading_key(req: IngestRequest) -> str:
    """The session setting the handler publishes what the batch in flight has read into (empty between batches)."""
    return f"{record_key(req)}.reading"


def note_key(req: IngestRequest) -> str:
    """The session setting the handler publishes its pacer's note into (what the progress line adds)."""
    return f"{record_key(req)}.note"


def published_reading(raw: str | None) -> InBatch | None:
    """What :func:`reading_key` holds, read back."""
    if not raw:
        return None
    batch_id, read = json.loads(raw)
    return InBatch(int(batch_id), int(read))


def stop_key(req: IngestRequest) -> str:
    """The session setting the client sets before it stops the query."""
    return f"{record_key(req)}.stop"


class LeaseAge:
    """How long the client's lease has gone unrenewed, by this process's clock (a lease not set yet does not age)."""

    def __init__(self) -> None:
        self.seen: str | None = None
        self.at = time.monotonic()

    def of(self, value: str | None) -> float:
        """The age after reading the lease's ``value`` now: 0 when it changed (renewed) or is not set."""
        now = time.monotonic()
        if value is None or value != self.seen:
            self.seen, self.at = value, now
        return now - self.at


def fold(reports: ReportLog) -> Tally:
    """The tally of everything the query's run committed so far, from its batch reports."""
    tally = Tally()
    for report in reports.read():
        tally = tally.after(report)
    return tally


def release_locally(batch: DataFrame) -> None:
    """Let go of a ``foreachBatch`` DataFrame without asking the server to drop it.

    The server caches each batch's DataFrame under an id for the worker and drops it itself once the function
    returned (``StreamingForeachBatchHelper``, in a ``finally``). pyspark's worker also asks it to, from the
    reference's finalizer, through a blocking call without a deadline; seen hanging for good after a Ctrl-C'd
    job, with the query waiting on the worker for ever. Clearing the id makes that finalizer a no-op.
    """
    plan = getattr(batch, "_plan", None)
    if type(plan).__name__ == "CachedRemoteRelation":
        plan._relation_id = None


@dataclass
class RemoteBatch:
    """``foreachBatch`` of one request over Connect: built into a :class:`BatchHandler` on the server."""

    req: IngestRequest
    shipped: str  # the pipeline's resolved config
    cores: int
    budget_file: str

    def __post_init__(self) -> None:
        self._handler: BatchHandler | None = None
        self._lease = LeaseAge()
        self._published_lock = threading.RLock()  # the reading is cleared before a batch's record is published
        self._reading = ""  # what reading_key holds
        self._note: str | None = None  # what note_key holds

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    def __call__(self, ranges: DataFrame, batch_id: int) -> None:
        spark = ranges.sparkSession
        try:
            self._check_lease(spark)
            handler = self._handler or self._build(spark)
            try:
                handler(ranges, batch_id)
            except BaseException:
                failure = handler.state.failure
                self._publish(spark, handler, failure)
                raise
            self._publish(spark, handler, None)
        finally:
            release_locally(ranges)

    def warm(self) -> None:
        """Import what :meth:`_build` needs (pyiceberg, pandas, the catalog's driver): called by the server's
        ``foreachBatch`` worker in a thread as soon as it has this function, so the first batch finds them loaded."""
        import tailfill.config
        import tailfill.pipeline.handle
        import tailfill.run.batch
        import tailfill.run.pacing
        import tailfill.state.store  # noqa: F401

    def _check_lease(self, spark: SparkSession) -> None:
        age = self._lease.of(spark.conf.get(lease_key(self.req), None))
        if age > LEASE_S:
            raise JobCancelled(f"[{self.req.label}] cancelled on the Spark Connect server: its client has not "
                               f"renewed its lease for {age:.0f}s (it went away)")

    def _watch(self, spark: SparkSession, state: QueryState, pacer: Pacer) -> None:
        """Every second until the query stops: publish what the batch in flight has read and the pacer's note, and
        set ``state.stopping`` (the pacer's waits end) once the client asks the query to stop or its lease lapses."""
        lease = LeaseAge()  # this thread's own: the batch's check keeps its
        while not state.stopping.is_set():
            time.sleep(1.0)
            try:
                self._publish_note(spark, pacer.note())
                with self._published_lock:  # taken and published at once: never after the batch's record
                    self._publish_reading(spark, state.in_batch())
                asked = spark.conf.get(stop_key(self.req), None)
                age = lease.of(spark.conf.get(lease_key(self.req), None))
            except Exception:  # the session is gone, and the query with it
                return
            if asked or age > LEASE_S:
                state.stopping.set()

    def _publish_reading(self, spark: SparkSession, reading: InBatch | None) -> None:
        """Set :func:`reading_key` to ``reading`` if it changed."""
        value = json.dumps([reading.batch_id, reading.read]) if reading is not None else ""
        with self._published_lock:
            if value != self._reading:
                spark.conf.set(reading_key(self.req), value)
                self._reading = value

    def _publish_note(self, spark: SparkSession, note: str) -> None:
        """Set :func:`note_key` to the pacer's ``note`` if it changed."""
        if note != self._note:
            spark.conf.set(note_key(self.req), note)
            self._note = note

    def _build(self, spark: SparkSession) -> BatchHandler:
        from pathlib import Path

        from tailfill.config import PipelineConfig
        from tailfill.pipeline.handle import Pipeline
        from tailfill.run.batch import BatchHandler
        from tailfill.run.pacing import pacer_for
        from tailfill.state.store import report_file

        pipeline = Pipeline(PipelineConfig.from_json(self.shipped))
        tables = pipeline.open_tables()
        reports = report_file(pipeline.state, self.req.run_id, self.req.name)
        state = QueryState(fold(reports))
        pacer = pacer_for(pipeline, self.req, self.cores, state.stopping,
                          lambda line: print(f"[{self.req.label}] {line}", flush=True))
        threading.Thread(target=self._watch, args=(spark, state, pacer), name="tailfill-query-watch",
                         daemon=True).start()
        self._handler = BatchHandler(self.req, self.shipped, pipeline.committer(tables), reports, pacer,
                                     Path(self.budget_file), state)
        return self._handler

    def _publish(self, spark: SparkSession, handler: BatchHandler, failure: Failure | None) -> None:
        latencies = handler.state.tally.latencies  # constant space: the run's latency quantiles
        record = {"step": handler.state.step, "at": time.time(),
                  "latencies": [list(latencies.seconds), list(latencies.weights)]}
        if failure is not None:
            record["failure"] = {"error": failure.error.to_dict(), "step": failure.step}
        self._publish_note(spark, handler.pacer.note())
        with self._published_lock:  # the batch's reading gone before its record: never counted twice by the client
            self._publish_reading(spark, None)
            spark.conf.set(record_key(self.req), json.dumps(record))


class RemoteQuery:
    """The client's side of a query over Connect: renews the lease, and refreshes the query state it shares
    with the poll and restart loops from the batch reports and the handler's record."""

    def __init__(self, spark: SparkSession, req: IngestRequest, reports: ReportLog, state: QueryState):
        self.spark, self.req, self.reports, self.state = spark, req, reports, state
        self.beats = 0
        self._seen: object = _UNSEEN  # the record as the last sync read it

    def sync(self, force: bool = False) -> None:
        """Renew the lease; bring the shared state up to what the server has committed and recorded.

        The handler publishes its record after every batch, committed or failed, and after that batch's
        report: while the record is what the last sync read, no batch ended since, and the reports are not
        listed again. ``force``: read them anyway (once the query has ended, whatever its record says).
        """
        self.beats += 1
        self.spark.conf.set(lease_key(self.req), f"{self.beats}")
        raw = self.spark.conf.get(record_key(self.req), None)
        self.state.published = published_reading(self.spark.conf.get(reading_key(self.req), None))  # after the record
        self.state.note = self.spark.conf.get(note_key(self.req), None)
        if raw == self._seen and not force:
            return
        self._seen = raw
        self.state.tally = fold(self.reports)
        if not raw:
            return
        record = json.loads(raw)
        self.state.step = record.get("step", self.state.step)
        if record.get("latencies"):
            seconds, weights = record["latencies"]
            self.state.tally = replace(self.state.tally, latencies=LatencySample(tuple(seconds), tuple(weights)))
        failure = record.get("failure")
        if failure is not None:
            self.state.failure = Failure(ErrorInfo.from_dict(failure["error"]), failure["step"])

    def wait(self, seconds: float, sleep: Callable[[float], None] = time.sleep) -> None:
        """Wait ``seconds`` before a restart, talking to the server every :data:`KEEP_ALIVE_S` seconds and at the
        end, so that it does not close the idle session (and the restart with it)."""
        left = seconds
        while left > 0:
            step = min(left, KEEP_ALIVE_S)
            sleep(step)
            left -= step
            self.spark.conf.get(lease_key(self.req), None)  # any request keeps the session open

    def ask_stop(self) -> None:
        """Tell the server's handler the query is being stopped (before stopping it): its pacer ends any wait."""
        self.spark.conf.set(stop_key(self.req), "1")

    def forget(self) -> None:
        """A new attempt: the last attempt's failure record and stop are no longer this one's."""
        for key in (record_key(self.req), stop_key(self.req), reading_key(self.req), note_key(self.req)):
            self.spark.conf.unset(key)

    def close(self) -> None:
        """The query ended: none of its settings stays in the session (a home's jobs share one, for hours)."""
        with contextlib.suppress(Exception):  # a server that went away keeps nothing either
            self.forget()
            self.spark.conf.unset(lease_key(self.req))
