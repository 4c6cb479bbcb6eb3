"""The one Spark code path: ingest an offset range into the table in capped, atomic micro-batches.

A backfill slice is ``[start, end)`` with trigger availableNow; the tail is ``[start, ∞)`` with
availableNow (``--once``) or a processing-time trigger. A bounded request (availableNow) runs as a
:class:`~tailfill.run.direct_query.DirectQuery`: its batches' offset ranges are planned here, with the
source's planning, and no streaming query starts. A processing-time tail runs one Structured Streaming
query, whose ``tailfill_kafka`` plans each micro-batch's ranges. Either way the batch handler
(:class:`~tailfill.run.batch.BatchHandler`) prepares them on the executors and commits them here, on the
driver, while the poll loop (:mod:`tailfill.run.poll`) watches the query. Batches are sized by a budget
the planning reads before each batch: a fixed cap, or a time budget from the rate measured so far.

The table's ledger is the one resume truth: a request starts at its first uncommitted offset, and a live
tail's checkpoint is named by its bounds, so a checkpoint is only ever reused by the same request (to
replay a failed batch with the same offsets); the request's checkpoint folder (its budget and read counts)
is removed when the request finishes. A failed query is
restarted as its :mod:`~tailfill.run.restarts` policy says, or the run stops with the cause (no endless
restart loop); each restart is announced as an event of the job contract.
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from tailfill.errors import ConfigError, ErrorInfo, QueryEnded, QueryFailed, QueryStalled
from tailfill.lake.ledger import read_ledger
from tailfill.lake.tables import Tables
from tailfill.offsets import PartitionOffsets
from tailfill.pipeline.handle import Pipeline
from tailfill.plumbing.durable import write_whole
from tailfill.plumbing.whole_lines import line_printer
from tailfill.run import checkpoint
from tailfill.run.batch import BatchHandler
from tailfill.run.connect_batch import RemoteBatch, RemoteQuery, fold
from tailfill.run.contract import Event, IngestResult, Restarted
from tailfill.run.direct_query import BatchCursor, DirectBatchFailed, DirectQuery
from tailfill.run.job_stop import StopAsked
from tailfill.run.pacing import pacer_for, watcher_pacer_for
from tailfill.run.plan import IngestRequest, resume_at
from tailfill.run.poll import Watch, poll
from tailfill.run.query_state import QueryState
from tailfill.run.restarts import Failure, RestartPolicy
from tailfill.run.spark_connect import (
    foreach_batch,
    is_connect,
    query_failed,
    server_gone,
    server_went_away,
    session_cores,
)
from tailfill.settings import settings
from tailfill.source.handoff import hold_file, release, reported_failure
from tailfill.source.read_counts import READS_DIR
from tailfill.source.stream_api import ADMISSION_CONTROL
from tailfill.state.store import clear_stop, report_file

REQUEST_FILE = "tailfill-request.json"  # our own note in a checkpoint folder: the request's bounds
BUDGET_FILE = "tailfill-budget.json"  # the next batch's cap, read by the source before each batch
FAILURE_FILE = "tailfill-source-failure.json"  # the error the source's planning failed with, as data
OURS = (REQUEST_FILE, BUDGET_FILE, hold_file(Path(BUDGET_FILE)).name, FAILURE_FILE, READS_DIR)
BOUNDED_ENV = "TAILFILL_BOUNDED_RUNS"  # "query": a bounded request runs a streaming query too (settings())

Log = Callable[[str], None]
Emit = Callable[[Event], None]


def _ours(path: Path) -> bool:
    """Tailfill's own files in a checkpoint folder (Spark's are everything else)."""
    return path.name in OURS


def _open_checkpoint(req: IngestRequest, log: Log) -> None:
    """Create the request's checkpoint folder and make it startable whatever a kill left in it.

    Checkpoints are named by their request's bounds, and requests start at the ledger's position,
    so only a rerun of the same request (nothing committed since) finds one. Checkpoints of other
    requests are left alone: one may belong to a query running right now (overlapping backfills).
    """
    req.checkpoint.mkdir(parents=True, exist_ok=True)
    checkpoint.make_startable(req.checkpoint, req.label, log, keep=_ours)
    write_whole(req.checkpoint / REQUEST_FILE, json.dumps(
        {"start": req.start.to_dict(), "end": req.end.to_dict() if req.end else None}))


def source_options(pipeline: Pipeline, req: IngestRequest, cores: int,
                   start: PartitionOffsets | None = None) -> dict[str, str]:
    """``tailfill_kafka``'s options for ``req`` from ``start`` (default: the request's): its bounds, its batches'
    cap, ``cores`` consumers reading each batch's ranges, the batches' budget read from the checkpoint's
    :data:`BUDGET_FILE`."""
    options = {
        "source": pipeline.resolved.source.model_dump_json(),
        "startingOffsets": (start or req.start).to_json(),
        "maxOffsetsPerTrigger": str(req.max_offsets_per_batch),
        "budgetFile": str(req.checkpoint / BUDGET_FILE),
        "failureFile": str(req.checkpoint / FAILURE_FILE),
        "output": "ranges",
        "tasks": str(cores),  # one consumer per core reads the batch
    }
    if req.end is not None:
        options["endingOffsets"] = req.end.to_json()
    return options


def start_query(spark: SparkSession, pipeline: Pipeline, req: IngestRequest, handler: Callable,
                cores: int, start: PartitionOffsets) -> StreamingQuery:
    """The request's streaming query, started: ``tailfill_kafka`` ranges from ``start`` (when its checkpoint holds no
    batch to replay) into ``handler`` (``foreachBatch``), ``cores`` consumers reading each batch, the batches' budget
    read from the checkpoint's :data:`BUDGET_FILE`."""
    stream = (
        spark.readStream.format("tailfill_kafka").options(**source_options(pipeline, req, cores, start)).load()
        .writeStream.foreachBatch(handler)
        .queryName(f"tailfill-{pipeline.name}-{req.name}")
        .option("checkpointLocation", str(req.checkpoint))
    )
    if req.trigger == "available_now":
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=f"{req.trigger_interval_seconds} seconds")
    return stream.start()


def run_ingest(spark: SparkSession, pipeline: Pipeline, tables: Tables, req: IngestRequest, log: Log | None = None,
               emit: Emit | None = None, cancel: threading.Event | None = None,
               stop: StopAsked | None = None) -> IngestResult:
    """Run ``req`` to completion (availableNow) or until it is stopped (processing time).

    ``log`` takes progress lines (default: stderr), ``emit`` the job's events (default: their lines on
    stdout). ``cancel``: once set, the query stops at once and :class:`~tailfill.errors.JobCancelled` is
    raised (the job's caller went away); what was committed stays, the rest is replayed later. ``stop``: once
    asked, the query stops after its batch in flight and the request ends there.
    """
    log = log or line_printer(sys.stderr)
    if emit is None:
        out = line_printer(sys.stdout)
        emit = lambda event: out(event.line())  # noqa: E731
    reports = report_file(pipeline.state, req.run_id, req.name)
    _open_checkpoint(req, log)
    state = QueryState(fold(reports))  # an earlier try of the same run: its batches count as done
    cores, budget_file = session_cores(spark), req.checkpoint / BUDGET_FILE
    qlog = lambda line: log(f"[{req.label}] {line}")  # noqa: E731
    # bounded: batches planned here, no streaming query (direct_query)
    direct = req.trigger == "available_now" and not settings().bounded_as_query
    if req.trigger == "available_now" and not direct and not ADMISSION_CONTROL:
        raise ConfigError(f"{BOUNDED_ENV}=query runs a bounded request as a streaming query, which needs admission "
                          "control of Python stream readers (Spark 4.2 and later); this Spark has none (fix: unset "
                          f"{BOUNDED_ENV}: bounded requests plan their own batches)")
    if is_connect(spark) and not direct:  # the batches run in the server's foreachBatch worker, its own pacer
        remote = RemoteQuery(spark, req, reports, state)
        pacer = watcher_pacer_for(pipeline, req, cores, state.stopping, qlog)
        handler = foreach_batch(spark, RemoteBatch(req, pipeline.shipped, cores, str(budget_file)))
    else:
        remote = None
        pacer = pacer_for(pipeline, req, cores, state.stopping, qlog)
        handler = BatchHandler(req, pipeline.shipped, pipeline.committer(tables), reports, pacer, budget_file, state)
    pacer.first_budget().write(budget_file)
    release(budget_file)  # a hold a killed run of the same request left
    if req.end is None:
        clear_stop(pipeline.state)  # a stop asked of an earlier tail is not for this one
    started = time.monotonic()
    try:
        watch = Watch(req, state, pacer, pipeline.state, cancel, log, remote.sync if remote else None,
                      remote.ask_stop if remote else None, stop, budget_file)
        resume = Resume(req, tables, qlog)
        if direct:
            options, cursor = source_options(pipeline, req, cores), BatchCursor(req.start, state.tally.batches)

            def start() -> DirectQuery:
                cursor.start = resume(cursor.start)  # the batch to replay, past what the ledger holds
                return DirectQuery(spark, req, handler, options, cursor, state).start()
        else:
            start = lambda: start_query(spark, pipeline, req, handler, cores, resume(req.start))  # noqa: E731
        restarts, causes = _attempts(start, req, watch, emit, remote)
    finally:
        pacer.stopped()
        if remote is not None:
            remote.close()
    shutil.rmtree(req.checkpoint, ignore_errors=True)  # finished: the ledger holds everything it did
    result = state.tally.result(req.run_id, req.label)
    result.seconds, result.restarts, result.causes = time.monotonic() - started, restarts, causes
    result.warnings = pacer.warnings()
    return result


class Resume:
    """Where each attempt of a request reads from: the first at ``at`` (the ledger's position when the request was
    planned, moments ago), every restart at the ledger's position then (:func:`~tailfill.run.plan.resume_at`), so
    a restart never reads again what the run committed before it failed."""

    def __init__(self, req: IngestRequest, tables: Tables, log: Log):
        self.req, self.tables, self.log, self.attempts = req, tables, log, 0

    def __call__(self, at: PartitionOffsets) -> PartitionOffsets:
        self.attempts += 1
        if self.attempts == 1:
            return at
        try:
            self.tables.data.refresh()
            ledger = read_ledger(self.tables.data)
        except Exception as exc:  # a catalog that is away: the commit says so, and commits skip what is committed
            self.log(f"the restart reads from where its last attempt was ({ErrorInfo.of(exc)}: the ledger could "
                     "not be read)")
            return at
        start = resume_at(ledger, at, self.req.end)
        ahead = sum(start[tp] - at[tp] for tp in start)
        self.log(f"the restart reads from the ledger's position: {ahead:,} offsets past where its last attempt began "
                 "(committed already)" if ahead else "the restart reads from where its last attempt began (nothing "
                 "past it is committed)")
        return start


def _attempts(start: Callable[[], StreamingQuery | DirectQuery], req: IngestRequest, watch: Watch, emit: Emit,
              remote: RemoteQuery | None) -> tuple[int, list[str]]:
    """Run the query (``start`` starts an attempt) until it completes, restarting it from its checkpoint (or its
    cursor) as the restart policy says; returns how many restarts it took and their causes. Raises
    :class:`~tailfill.errors.QueryFailed` when the policy says stop (the failure's class, ``retryable`` and fix are
    the error's)."""
    state, log = watch.state, watch.log
    restarts = RestartPolicy(req.max_consecutive_failures, req.restart_backoff_seconds,
                             req.retry_ceiling_seconds).start()
    causes: list[str] = []
    while True:
        if causes and watch.stop is not None and watch.stop.asked:  # no restart once the job is asked to stop
            log(f"[{req.label}] stopped before its restart ({watch.stop.why}); the next run replays the failed batch")
            return len(causes), causes
        before = state.tally.batches
        state.new_attempt()
        if remote is not None:
            remote.forget()
        reported_failure(req.checkpoint / FAILURE_FILE)  # an earlier attempt's: not this one's
        try:
            _watched(lambda: poll(start(), watch), req, remote)
            return len(causes), causes
        except Exception as exc:
            if not isinstance(exc, StreamingQueryException | DirectBatchFailed | QueryEnded | QueryStalled) and not (
                    remote is not None and query_failed(exc)):
                raise
            if remote is not None:
                remote.sync(force=True)  # what the server's handler recorded of its failure
            failure = _failure(exc, state, req)
            failure = Failure(failure.error, failure.step, advanced=state.tally.batches > before)
            causes.append(str(failure.error))
            state.failed(str(failure.error))  # the progress line says so until a batch commits
            restarts, decision = restarts.after(failure, time.monotonic())
            if decision.stop is not None:
                raise QueryFailed(f"[{req.label}] {decision.stop}", failure.error) from None
            if checkpoint.refused(type(exc).__name__, str(exc), req.checkpoint):
                checkpoint.discard(req.checkpoint, keep=_ours)
                log(f"[{req.label}] Spark refused the checkpoint {req.checkpoint.name}: discarded it; the restart "
                    "starts from the table's ledger")
            event = Restarted(req.label, decision.failures, decision.tolerated, failure.step, failure.error,
                              decision.wait_seconds)
            log(event.asstr())
            emit(event)
            if remote is not None:  # over Connect the session must outlive the wait
                _watched(functools.partial(remote.wait, decision.wait_seconds), req, remote)
            elif watch.stop is not None:
                watch.stop.wait(decision.wait_seconds)  # a stop asked meanwhile ends the wait
            else:
                time.sleep(decision.wait_seconds)


def _watched(run: Callable[[], None], req: IngestRequest, remote: RemoteQuery | None) -> None:
    """``run`` the query; over Connect, a server that went away is one line (:class:`ConnectServerError`)."""
    if remote is None:
        return run()
    try:
        run()
        remote.sync(force=True)  # the batches committed since the last look
    except Exception as exc:
        if isinstance(exc, StreamingQueryException) or not server_gone(exc):
            raise
        raise server_went_away(req.label, exc, remote.state.tally.offsets) from None
    return None


def _failure(exc: Exception, state: QueryState, req: IngestRequest) -> Failure:
    """What failed: the poll loop's own finding (the query ended by itself, or stalled), else what the batch
    handler caught, else what the source's planning reported, else Spark's own failure, known by its text alone."""
    if isinstance(exc, QueryEnded | QueryStalled):
        return Failure(ErrorInfo.of(exc), state.step)
    if state.failure is not None:
        return state.failure
    reported = reported_failure(req.checkpoint / FAILURE_FILE)
    if reported is not None:
        return Failure(reported)
    return Failure(ErrorInfo.foreign(type(exc).__name__, str(exc)))
