"""The one Spark code path: ingest an offset range into the table in capped, atomic micro-batches.

A backfill slice is ``[start, end)`` with trigger availableNow; the tail is ``[start, ∞)`` with
availableNow (``--once``) or a processing-time trigger. Both run one Structured Streaming query:
``tailfill_kafka`` plans each micro-batch's offset ranges, and ``foreachBatch`` prepares them on the
executors and commits them here, on the driver (:mod:`tailfill.lake.spark_writer`). Batches are
sized by a budget file the source reads before each batch: a fixed cap, or a time budget from the
rate measured so far. The table's ledger is the one resume truth: a request
starts at its first uncommitted offset, and its checkpoint is named by its bounds, so a checkpoint
is only ever reused by the same request (to replay a failed batch with the same offsets) and is
removed when the request finishes. Failures that do not advance the ledger are tolerated up to
the configured budget, then the run stops with the cause (no endless restart loop).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from tailfill import failpoints
from tailfill.config import PipelineConfig
from tailfill.errors import IngestError, JobCancelled, error_class, is_retryable
from tailfill.formats.evolve import registry_columns
from tailfill.lake.commit import commit_prepared
from tailfill.lake.prepare import PreparedRange
from tailfill.lake.spark_writer import prepare_batch
from tailfill.lake.tables import Tables, ensure_tables
from tailfill.offsets import ranges_between, total
from tailfill.run import checkpoint
from tailfill.run.pacing import pacer_for
from tailfill.run.plan import IngestRequest
from tailfill.run.submit import IngestResult
from tailfill.state.durable import write_atomic
from tailfill.state.freshness import LatencySample, freshness
from tailfill.state.records import BatchReport, format_stages
from tailfill.state.store import ReportLog, append_report, clear_stop, read_reports, report_file, stop_requested

# The last line of a Python traceback: "package.module.ExceptionClass: message".
_PY_EXCEPTION = re.compile(r"^(?:[a-z_]\w*\.)*([A-Z]\w*): (.+)$", re.MULTILINE)
_TRACEBACK = "Traceback (most recent call last):"
_WRAPPERS = frozenset({"PythonException", "StreamingQueryException", "Py4JJavaError", "CapturedException",
                       "ForeachBatchUserFuncException", "SparkException"})
REQUEST_FILE = "tailfill-request.json"  # our own note in a checkpoint folder: the request's bounds
BUDGET_FILE = "tailfill-budget.json"  # the next batch's cap, read by the source before each batch
HEARTBEAT_S = 15.0
MAX_BACKOFF_S = 60.0  # the longest wait before a restart, however many failures came before


def explain(exc: BaseException) -> tuple[str, str]:
    """(error class, message) of the root cause inside a Spark exception's text."""
    text = str(exc)
    start = text.find(_TRACEBACK)
    found = list(_PY_EXCEPTION.finditer(text, start)) if start >= 0 else []
    # Spark's and py4j's own exceptions only carry the real one (from a Python worker) further down.
    found = [m for m in found if m.group(1) not in _WRAPPERS] or found
    # The first Python exception after the traceback is the root; later ones happened while handling it.
    named = [m for m in found if error_class(m.group(1)) is not None] or found
    if named:
        return named[0].group(1), named[0].group(2).strip()
    return type(exc).__name__, text.splitlines()[0] if text else repr(exc)


def _ours(path: Path) -> bool:
    """Tailfill's own files in a checkpoint folder (Spark's are everything else)."""
    return path.name in (REQUEST_FILE, BUDGET_FILE)


def _open_checkpoint(req: IngestRequest, log: Callable[[str], None]) -> None:
    """Create the request's checkpoint folder and make it startable whatever a kill left in it.

    Checkpoints are named by their request's bounds, and requests start at the ledger's position,
    so only a rerun of the same request (nothing committed since) finds one. Checkpoints of other
    requests are left alone: one may belong to a query running right now (overlapping backfills).
    """
    req.checkpoint.mkdir(parents=True, exist_ok=True)
    checkpoint.make_startable(req.checkpoint, req.label, log, keep=_ours)
    write_atomic(req.checkpoint / REQUEST_FILE, json.dumps(
        {"start": req.start.to_dict(), "end": req.end.to_dict() if req.end else None}))


def _progress_line(req: IngestRequest, done: IngestResult, last: BatchReport | None, started: float,
                   note: str = "") -> str:
    """``[label] done/planned offsets (pct) rows/s batches ETA | last batch's stages | pacer's note``.

    A processing-time tail has no planned total (the topic grows while it runs: its backlog is in
    the note); an available-now tail's total is the end it read to, which it may pass by a little.
    """
    offsets, rows = done.offsets, done.rows + done.quarantined
    end = req.end or (req.target_end if req.trigger == "available_now" else None)
    planned = max(total(ranges_between(req.start, end)), offsets) if end else 0
    elapsed = max(time.monotonic() - started, 1e-6)
    pct = f" ({100 * offsets / planned:.0f}%)" if planned else ""
    eta = f" ETA {max(planned - offsets, 0) / (offsets / elapsed):.0f}s" if planned and offsets else ""
    done_of = f"{offsets:,}/{planned:,}" if planned else f"{offsets:,}"
    line = f"[{req.label}] {done_of} offsets{pct} {rows / elapsed:,.0f} rows/s {done.batches} batches{eta}"
    if last is not None and last.stages:
        line += " | last batch: " + format_stages(last.stages)
    return line + (f" | {note}" if note else "")


class BatchWriter:
    """``foreachBatch`` of one request: prepare on the executors, commit, report, then ask the pacer.

    Each batch goes prepare (:func:`~tailfill.lake.spark_writer.prepare_batch`) → commit
    (:func:`commit_report`: one typed :class:`BatchReport`) → the run's tally → the
    :class:`~tailfill.run.pacing.Pacer`, whose :class:`~tailfill.source.budget.Budget` the source
    reads before the next batch.
    """

    def __init__(self, cfg: PipelineConfig, req: IngestRequest, tables: Tables, reports: ReportLog, cores: int,
                 log: Callable[[str], None]):
        self.cfg, self.req, self.reports = cfg, req, reports
        self.tables = tables
        self.data_location, self.quarantine_location = tables.data.location(), tables.quarantine.location()
        self.done, self.last = IngestResult(req.run_id, req.label), None  # every batch of the run so far
        for report in read_reports(reports):  # an earlier try of the same run: read once, then kept here
            self._count(report)
        self.budget_file = req.checkpoint / BUDGET_FILE
        self.last_end = time.time()
        self.stopping = threading.Event()
        self.latencies = LatencySample((), ())  # the run's, merged batch by batch (constant size)
        self.pending_yield = 0.0
        self.step = "starting"
        self.failed_step: str | None = None  # where the last failed attempt failed, if inside a batch
        self.pacer = pacer_for(cfg, req, cores, self.stopping, lambda line: log(f"[{req.label}] {line}"))
        self.pacer.first_budget().write(self.budget_file)

    def _count(self, b: BatchReport) -> None:
        done = self.done
        done.batches += 1
        done.offsets += b.offsets
        done.rows += b.rows
        done.quarantined += b.quarantined
        done.skipped_offsets += b.offsets if not b.committed else 0
        for stage, secs in b.stages.items():
            done.stages[stage] = round(done.stages.get(stage, 0.0) + secs, 3)
        self.last = b

    def _triggered_at(self, started: float) -> float:
        """When Spark began this batch: processing-time triggers fire on multiples of the interval."""
        if self.req.trigger != "processing_time":
            return self.last_end
        interval = self.req.trigger_interval_seconds
        return max(self.last_end, math.floor(started / interval) * interval)

    def __call__(self, ranges: DataFrame, batch_id: int) -> None:
        self.step = f"prepare (read, parse, write on the executors) of batch {batch_id}"
        try:
            self._batch(ranges, batch_id)
        except BaseException:
            self.failed_step = self.step  # for the restart policy: where this attempt failed
            raise

    def _batch(self, ranges: DataFrame, batch_id: int) -> None:
        started = time.time()
        triggered = self._triggered_at(started)
        prepared = prepare_batch(ranges, self.cfg, self.req.run_id, self.data_location, self.quarantine_location,
                                 registry_columns(self.cfg, self.tables.data))
        if not prepared:
            self.last_end = time.time()
            return  # an empty batch commits nothing and never fails
        shown = ", ".join(str(p.marker.range) for p in prepared[:4]) + (" …" if len(prepared) > 4 else "")
        self.step = f"commit of batch {batch_id} ({shown})"
        stages = {"plan": started - triggered, "prepare": time.time() - started}
        if self.pending_yield:
            stages["yield"] = self.pending_yield
        report, sample = commit_report(self.cfg, self.tables, self.req.run_id, batch_id, prepared, triggered, stages)
        self.step = f"report and sizing after batch {batch_id}"
        append_report(self.reports, report)
        self._count(report)
        self.latencies = LatencySample.merged([self.latencies, sample])
        budget, self.pending_yield = self.pacer.after_batch(report)
        budget.write(self.budget_file)
        self.last_end = time.time()


def commit_report(cfg: PipelineConfig, tables: Tables, run_id: str, batch_id: int, prepared: list[PreparedRange],
                  triggered: float, stages: dict[str, float]) -> tuple[BatchReport, LatencySample]:
    """Commit one prepared batch and describe it: its :class:`BatchReport` and its records' latency sample.

    ``stages``: the seconds already spent (plan, prepare, a yield before it); read, parse and write
    come from the executors, commit is measured here.
    """
    failpoints.pause("before-commit")
    failpoints.maybe_fail("before-commit")
    result, commit_s = commit_prepared(cfg, tables, run_id, batch_id, prepared)
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
        freshness=fresh.to_dict() if fresh else None)
    return report, sample


def _run_query(spark: SparkSession, cfg: PipelineConfig, req: IngestRequest, writer: BatchWriter,
               log: Callable[[str], None], cancel: threading.Event | None) -> None:
    reader = (
        spark.readStream.format("tailfill_kafka")
        .option("source", cfg.source.model_dump_json())
        .option("startingOffsets", req.start.to_json())
        .option("maxOffsetsPerTrigger", str(req.max_offsets_per_batch))
        .option("budgetFile", str(writer.budget_file))
        .option("output", "ranges")
        .option("tasks", str(spark.sparkContext.defaultParallelism))  # one consumer per core reads the batch
    )
    if req.end is not None:
        reader = reader.option("endingOffsets", req.end.to_json())
    stream = (
        reader.load()
        .writeStream.foreachBatch(writer)
        .queryName(f"tailfill-{cfg.name}-{req.name}")
        .option("checkpointLocation", str(req.checkpoint))
    )
    if req.trigger == "available_now":
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=f"{req.trigger_interval_seconds} seconds")
    query = stream.start()
    started, printed, printed_at, beat_at = time.monotonic(), -1, 0.0, 0.0
    try:
        while not query.awaitTermination(1.0):
            if cancel is not None and cancel.is_set():
                writer.stopping.set()
                query.stop()  # at once, as a killed spark-submit would: an unfinished batch is replayed later
                raise JobCancelled(f"[{req.label}] cancelled: its caller went away or asked to stop; "
                                   f"{writer.done.offsets:,} offsets committed before")
            if req.stop_after_seconds is not None and time.monotonic() - started >= req.stop_after_seconds:
                writer.stopping.set()
                _stop_between_batches(query)
                log(f"[{req.label}] stopped after {req.stop_after_seconds:.0f}s as asked")
                continue
            if req.end is None and stop_requested(cfg):
                writer.stopping.set()
                _stop_between_batches(query)
                clear_stop(cfg)
                log(f"[{req.label}] stopped between batches as asked (tailfill stop-tail)")
                continue
            if time.monotonic() - beat_at >= HEARTBEAT_S / 3:
                writer.pacer.heartbeat(caught_up=not query.status.get("isDataAvailable", True))
                beat_at = time.monotonic()
            if writer.done.batches != printed or time.monotonic() - printed_at >= HEARTBEAT_S:
                log(_progress_line(req, writer.done, writer.last, started, writer.pacer.note()))
                printed, printed_at = writer.done.batches, time.monotonic()
    except KeyboardInterrupt:
        log(f"[{req.label}] stopping after the current batch")
        writer.stopping.set()
        query.stop()
        raise


def _stop_between_batches(query, wait_s: float = 120.0) -> None:
    """Stop ``query`` when no micro-batch is in flight (a stopped batch would only be replayed)."""
    deadline = time.monotonic() + wait_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()


def run_ingest(
    spark: SparkSession, cfg: PipelineConfig, req: IngestRequest, log: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
) -> IngestResult:
    """Run ``req`` to completion (availableNow) or until it is stopped (processing time).

    ``cancel``: once set, the query stops at once and :class:`~tailfill.errors.JobCancelled` is raised
    (the warm Spark server's caller went away); what was committed stays, the rest is replayed later.
    """
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    tables = ensure_tables(cfg)
    reports = report_file(cfg, req.run_id, req.name)
    _open_checkpoint(req, log)
    writer = BatchWriter(cfg, req, tables, reports, spark.sparkContext.defaultParallelism, log)
    if req.end is None:
        clear_stop(cfg)  # a stop asked of an earlier tail is not for this one
    started = time.monotonic()
    result = writer.done
    try:
        _attempts(spark, cfg, req, writer, log, cancel)
    finally:
        writer.pacer.stopped()
    shutil.rmtree(req.checkpoint, ignore_errors=True)  # finished: the ledger holds everything it did
    result.seconds = time.monotonic() - started
    fresh = freshness([writer.latencies])
    result.freshness = fresh.to_dict() if fresh else None
    result.warnings = writer.pacer.warnings()
    return result


def _attempts(spark: SparkSession, cfg: PipelineConfig, req: IngestRequest, writer: BatchWriter,
              log: Callable[[str], None], cancel: threading.Event | None = None) -> None:
    """Run the query until it completes, restarting it from its checkpoint within the failure budget.

    Each restart waits ``restart_backoff_seconds``, doubling with every consecutive failure (at most
    :data:`MAX_BACKOFF_S`), so a broker or catalog that is back within the budget's waits is survived.
    Attempts that finish no batch of *this run* count against the budget (another writer's commits
    to the table in the meantime do not reset it); past it the run stops, naming the step at which
    the attempts failed (no endless restart loop).
    """
    result = writer.done
    consecutive, steps = 0, []
    while True:
        before = result.batches
        writer.failed_step = None
        try:
            _run_query(spark, cfg, req, writer, log, cancel)
            return
        except StreamingQueryException as exc:
            kind, message = explain(exc)
            cause = f"{kind}: {message}"
            result.causes.append(cause)
            if not is_retryable(kind):
                raise IngestError(f"[{req.label}] {cause}") from None
            consecutive, steps = (0, []) if result.batches > before else (consecutive + 1, steps)
            steps.append(writer.failed_step or "planning a batch (the source, reading offsets on the driver)")
            if consecutive > req.max_consecutive_failures:
                where = (f"each at the same step: {steps[-1]}" if len(set(steps)) == 1
                         else "at: " + "; ".join(dict.fromkeys(steps)))
                raise IngestError(
                    f"[{req.label}] {consecutive} consecutive failed attempts without committing any offset "
                    f"(tolerated: {req.max_consecutive_failures}), {where}; last cause: {cause}"
                ) from None
            if checkpoint.refused(kind, message, req.checkpoint):
                checkpoint.discard(req.checkpoint, keep=_ours)
                log(f"[{req.label}] Spark refused the checkpoint {req.checkpoint.name}: discarded it; the restart "
                    "starts from the table's ledger")
            result.restarts += 1
            wait = min(req.restart_backoff_seconds * 2 ** max(consecutive - 1, 0), MAX_BACKOFF_S)
            log(f"[{req.label}] batch failed ({consecutive}/{req.max_consecutive_failures} tolerated) at "
                f"{steps[-1]}: {cause}; restarting from the checkpoint in {wait:g}s")
            time.sleep(wait)
