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
the configured budget, then the run stops with the cause (seed 004: no endless restart loop).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from tailfill.config import PipelineConfig
from tailfill.dev import faults
from tailfill.errors import IngestError, error_class, is_retryable
from tailfill.lake.batch_report import BatchReport, append_report, read_reports, report_file
from tailfill.lake.commit import commit_prepared
from tailfill.lake.ledger import Ledger, read_ledger
from tailfill.lake.spark_writer import prepare_batch
from tailfill.lake.tables import Tables, ensure_tables
from tailfill.offsets import PartitionOffsets, intersect_all, ranges_between, subtract, total
from tailfill.run.plan import IngestRequest
from tailfill.run.submit import IngestResult
from tailfill.run.tuning import next_batch_offsets

# The last line of a Python traceback: "package.module.ExceptionClass: message".
_PY_EXCEPTION = re.compile(r"^(?:[a-z_]\w*\.)*([A-Z]\w*): (.+)$", re.MULTILINE)
_TRACEBACK = "Traceback (most recent call last):"
REQUEST_FILE = "tailfill-request.json"  # our own note in a checkpoint folder: the request's bounds
BUDGET_FILE = "tailfill-budget.json"  # the next batch's cap, read by the source before each batch
HEARTBEAT_S = 15.0


def explain(exc: BaseException) -> tuple[str, str]:
    """(error class, message) of the root cause inside a Spark exception's text."""
    text = str(exc)
    start = text.find(_TRACEBACK)
    found = list(_PY_EXCEPTION.finditer(text, start)) if start >= 0 else []
    # The first Python exception after the traceback is the root; later ones happened while handling it.
    named = [m for m in found if error_class(m.group(1)) is not None] or found
    if named:
        return named[0].group(1), named[0].group(2).strip()
    return type(exc).__name__, text.splitlines()[0] if text else repr(exc)


def _open_checkpoint(req: IngestRequest, ledger: Ledger, log: Callable[[str], None]) -> None:
    """Create the request's checkpoint folder and remove siblings that can never be used again.

    Checkpoints are named by their request's bounds and requests start at the ledger's position,
    which only moves forward: another tail checkpoint, or a backfill one that overlaps this request
    (an earlier start of the same slice) or whose bounds are all committed, belongs to a request
    that will not come again. Other slices' checkpoints (maybe running right now) stay.
    """
    root = req.checkpoint.parent
    root.mkdir(parents=True, exist_ok=True)
    mine = ranges_between(req.start, req.end) if req.end is not None else []
    for other in root.iterdir():
        if other == req.checkpoint or not other.is_dir():
            continue
        note = other / REQUEST_FILE
        if note.exists() and req.end is not None:
            data = json.loads(note.read_text())
            bounds = ranges_between(PartitionOffsets.from_dict(data["start"]), PartitionOffsets.from_dict(data["end"]))
            if subtract(bounds, ledger.committed) and not intersect_all(bounds, mine):
                continue
        log(f"[{req.label}] removed checkpoint {other.name} of an earlier request")
    req.checkpoint.mkdir(exist_ok=True)
    (req.checkpoint / REQUEST_FILE).write_text(json.dumps(
        {"start": req.start.to_dict(), "end": req.end.to_dict() if req.end else None}))


def _progress_line(req: IngestRequest, done: list[BatchReport], started: float) -> str:
    end = req.end or req.target_end
    planned = total(ranges_between(req.start, end)) if end else 0
    offsets = sum(b.offsets for b in done)
    rows = sum(b.records for b in done)
    elapsed = max(time.monotonic() - started, 1e-6)
    pct = f" ({100 * offsets / planned:.0f}%)" if planned else ""
    eta = f" ETA {max(planned - offsets, 0) / (offsets / elapsed):.0f}s" if planned and offsets else ""
    line = f"[{req.label}] {offsets:,}/{planned:,} offsets{pct} {rows / elapsed:,.0f} rows/s {len(done)} batches{eta}"
    if done and done[-1].stages:
        line += " | last batch: " + ", ".join(f"{k} {v:.1f}s" for k, v in done[-1].stages.items())
    return line


class BatchWriter:
    """``foreachBatch`` of one request: prepare on the executors, commit, report, size the next batch."""

    def __init__(self, cfg: PipelineConfig, req: IngestRequest, tables: Tables, reports: Path):
        self.cfg, self.req, self.reports = cfg, req, reports
        self.data_location, self.quarantine_location = tables.data.location(), tables.quarantine.location()
        self.budget_file = req.checkpoint / BUDGET_FILE
        self.last_end = time.time()
        self.set_budget(req.max_offsets_per_batch)

    def set_budget(self, offsets: int) -> None:
        tmp = self.budget_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"max_offsets": offsets}))
        tmp.replace(self.budget_file)  # atomic: the source never reads half a file

    def __call__(self, ranges: DataFrame, batch_id: int) -> None:
        started = time.time()
        prepared = prepare_batch(ranges, self.cfg, self.req.run_id, self.data_location, self.quarantine_location)
        if not prepared:
            self.last_end = time.time()
            return  # an empty batch commits nothing and never fails
        prepared_at = time.time()
        faults.pause("before-commit")
        faults.maybe_fail("before-commit")
        result, commit_s = commit_prepared(self.cfg, self.req.run_id, batch_id, prepared)
        faults.maybe_fail("after-commit")
        ended = time.time()
        offsets = sum(p.marker.range.size for p in prepared)
        stages = {"plan": started - self.last_end, "prepare": prepared_at - started}
        for stage in ("read", "parse", "write"):
            stages[stage] = sum(p.stages.get(stage, 0.0) for p in prepared)
        stages["commit"] = commit_s
        append_report(self.reports, BatchReport(
            batch_id=batch_id, at=ended, seconds=round(ended - self.last_end, 3), offsets=offsets,
            records=sum(p.marker.records for p in prepared), rows=sum(p.rows for p in prepared),
            quarantined=sum(p.quarantined for p in prepared), committed=result.committed, skipped=result.skipped,
            snapshot_id=result.snapshot_id, commit_ms=round(commit_s * 1000, 1),
            stages={k: round(v, 3) for k, v in stages.items()}))
        if self.req.batch_seconds is not None:
            self.set_budget(next_batch_offsets(offsets, ended - self.last_end, self.req.batch_seconds,
                                               self.req.max_offsets_per_batch))
        self.last_end = ended


def _run_query(spark: SparkSession, cfg: PipelineConfig, req: IngestRequest, tables: Tables, reports: Path,
               log: Callable[[str], None]) -> None:
    writer = BatchWriter(cfg, req, tables, reports)
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
    started, printed, printed_at = time.monotonic(), -1, 0.0
    try:
        while not query.awaitTermination(1.0):
            if req.stop_after_seconds is not None and time.monotonic() - started >= req.stop_after_seconds:
                _stop_between_batches(query)
                log(f"[{req.label}] stopped after {req.stop_after_seconds:.0f}s as asked")
                continue
            done = read_reports(reports)
            if len(done) != printed or time.monotonic() - printed_at >= HEARTBEAT_S:
                log(_progress_line(req, done, started))
                printed, printed_at = len(done), time.monotonic()
    except KeyboardInterrupt:
        log(f"[{req.label}] stopping after the current batch")
        query.stop()
        raise


def _stop_between_batches(query, wait_s: float = 120.0) -> None:
    """Stop ``query`` when no micro-batch is in flight (a stopped batch would only be replayed)."""
    deadline = time.monotonic() + wait_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()


def run_ingest(
    spark: SparkSession, cfg: PipelineConfig, req: IngestRequest, log: Callable[[str], None] | None = None
) -> IngestResult:
    """Run ``req`` to completion (availableNow) or until it is stopped (processing time)."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    result = IngestResult(req.run_id, req.label)
    tables = ensure_tables(cfg)
    reports = report_file(cfg.name, req.run_id, req.name)
    tables.data.refresh()
    _open_checkpoint(req, read_ledger(tables.data), log)
    started = time.monotonic()
    consecutive = 0
    while True:
        tables.data.refresh()
        before = read_ledger(tables.data).committed
        try:
            _run_query(spark, cfg, req, tables, reports, log)
            break
        except StreamingQueryException as exc:
            kind, message = explain(exc)
            cause = f"{kind}: {message}"
            result.causes.append(cause)
            if not is_retryable(kind):
                raise IngestError(f"[{req.label}] {cause}") from None
            tables.data.refresh()
            advanced = subtract(read_ledger(tables.data).committed, before)
            consecutive = 0 if advanced else consecutive + 1
            if consecutive > req.max_consecutive_failures:
                raise IngestError(
                    f"[{req.label}] {consecutive} consecutive failed attempts without committing any offset "
                    f"(tolerated: {req.max_consecutive_failures}); last cause: {cause}"
                ) from None
            result.restarts += 1
            log(f"[{req.label}] batch failed ({consecutive}/{req.max_consecutive_failures} tolerated): {cause}; "
                "restarting from the checkpoint")
    shutil.rmtree(req.checkpoint, ignore_errors=True)  # finished: the ledger holds everything it did
    result.seconds = time.monotonic() - started
    for b in read_reports(reports):
        result.batches += 1
        result.offsets += b.offsets
        result.rows += b.rows
        result.quarantined += b.quarantined
        result.skipped_offsets += b.offsets if not b.committed else 0
        for stage, secs in b.stages.items():
            result.stages[stage] = round(result.stages.get(stage, 0.0) + secs, 3)
    return result
