"""The one Spark code path: ingest an offset range into the table in capped, atomic micro-batches.

A backfill slice is ``[start, end)`` with trigger availableNow; the tail is ``[start, ∞)`` with
availableNow (``--once``) or a processing-time trigger. Both run a Structured Streaming query
``tailfill_kafka`` → ``tailfill_iceberg`` with a checkpoint, so a failed batch is replayed with the
same offsets. Consecutive failures that do not advance the ledger are tolerated up to the
configured budget, then the run stops with the cause (seed 004: no endless restart loop).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pyiceberg.table import Table
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from tailfill.broker import resolve_bootstrap
from tailfill.config import PipelineConfig, tailfill_home
from tailfill.lake import ensure_tables
from tailfill.ledger import read_ledger
from tailfill.offsets import OffsetRange, PartitionOffsets, ranges_between, subtract, total

# Errors that a restart cannot fix: stop at once with the message.
FATAL = ("ExpiredOffsetsError", "DroppedRecordsError", "ConfigError", "LakeError")
# The last line of a Python traceback: "package.module.ExceptionClass: message".
_PY_EXCEPTION = re.compile(r"^(?:[a-z_]\w*\.)*([A-Z]\w*): (.+)$", re.MULTILINE)
_TRACEBACK = "Traceback (most recent call last):"


class IngestError(RuntimeError):
    """An ingest run stopped; the message names the cause."""


def new_run_id(mode: str) -> str:
    return f"{mode}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class IngestRequest:
    mode: str  # "backfill" | "tail"
    label: str
    start: PartitionOffsets
    end: PartitionOffsets | None  # None: unbounded tail
    max_offsets_per_batch: int
    max_consecutive_failures: int
    checkpoint: Path
    run_id: str
    trigger: str = "available_now"  # or "processing_time"
    trigger_interval_seconds: float = 30.0
    target_end: PartitionOffsets | None = None  # for progress of an unbounded tail
    stop_after_seconds: float | None = None  # processing time: stop between batches after this long


@dataclass
class IngestResult:
    run_id: str
    label: str
    batches: int = 0
    offsets: int = 0
    rows: int = 0
    quarantined: int = 0
    skipped_offsets: int = 0
    seconds: float = 0.0
    restarts: int = 0
    causes: list[str] = field(default_factory=list)


def report_path(cfg: PipelineConfig, req: IngestRequest) -> Path:
    """Per-batch metrics of one query run: ``runs/<pipeline>/<run id>/<checkpoint name>.jsonl``."""
    return tailfill_home() / "runs" / cfg.name / req.run_id / f"{req.checkpoint.name}.jsonl"


def read_batches(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def explain(exc: BaseException) -> tuple[str, str]:
    """(error class, message) of the root cause inside a Spark exception's text."""
    text = str(exc)
    start = text.find(_TRACEBACK)
    found = list(_PY_EXCEPTION.finditer(text, start)) if start >= 0 else []
    # The first Python exception after the traceback is the root; later ones happened while handling it.
    named = [m for m in found if m.group(1) in FATAL] or found
    if named:
        return named[0].group(1), named[0].group(2).strip()
    return type(exc).__name__, text.splitlines()[0] if text else repr(exc)


def checkpoint_resume(path: Path) -> PartitionOffsets | None:
    """Where Spark would resume from this checkpoint: the start of the first unfinished batch."""
    offsets_dir, commits_dir = path / "offsets", path / "commits"
    if not offsets_dir.is_dir():
        return None
    ids = sorted(int(p.name) for p in offsets_dir.iterdir() if p.name.isdigit())
    if not ids:
        return None
    done = {int(p.name) for p in commits_dir.iterdir() if p.name.isdigit()} if commits_dir.is_dir() else set()
    last = ids[-1]
    resume_batch = last if last in done else last - 1
    if resume_batch < 0:
        return None
    for line in reversed((offsets_dir / str(resume_batch)).read_text().splitlines()):
        try:
            data = json.loads(line)
            return PartitionOffsets.from_dict(data)
        except (ValueError, AttributeError):
            continue
    return None


def _retire_stale_checkpoint(req: IngestRequest, committed: list[OffsetRange], log: Callable[[str], None]) -> None:
    """A checkpoint that would resume past uncommitted offsets is moved aside (the table wins)."""
    resume = checkpoint_resume(req.checkpoint)
    if resume is None:
        return
    # Offsets the checkpoint would jump over: between the table's position and the checkpoint's.
    skipped = [OffsetRange.of(tp, req.start[tp], resume[tp]) for tp in req.start
               if resume.get(tp) is not None and resume[tp] > req.start[tp]]
    pending = subtract(skipped, committed)
    if pending:
        aside = req.checkpoint.with_name(f"{req.checkpoint.name}.stale-{int(time.time())}")
        shutil.move(str(req.checkpoint), aside)
        log(f"checkpoint {req.checkpoint} would skip uncommitted offsets {', '.join(map(str, pending[:4]))}; "
            f"moved it to {aside} and resuming from the table's committed position")


def _progress_line(req: IngestRequest, done: list[dict], started: float) -> str:
    end = req.end or req.target_end
    planned = total(ranges_between(req.start, end)) if end else 0
    offsets = sum(b["offsets"] for b in done)
    rows = sum(b["records"] for b in done)
    elapsed = max(time.monotonic() - started, 1e-6)
    rate = rows / elapsed
    pct = f" ({100 * offsets / planned:.0f}%)" if planned else ""
    eta = f" ETA {max(planned - offsets, 0) / (offsets / elapsed):.0f}s" if planned and offsets else ""
    return f"[{req.label}] {offsets:,}/{planned:,} offsets{pct} {rate:,.0f} rows/s {len(done)} batches{eta}"


def _run_query(spark: SparkSession, cfg: PipelineConfig, req: IngestRequest, tables: tuple[Table, Table],
               log: Callable[[str], None]) -> None:
    data_table, quarantine_table = tables
    reader = (
        spark.readStream.format("tailfill_kafka")
        .option("source", cfg.source.model_dump_json())
        .option("bootstrapServers", resolve_bootstrap(cfg.source.bootstrap_servers))
        .option("startingOffsets", req.start.to_json())
        .option("maxOffsetsPerTrigger", str(req.max_offsets_per_batch))
        .option("includeRangeMarkers", "true")
    )
    if req.end is not None:
        reader = reader.option("endingOffsets", req.end.to_json())
    writer = (
        reader.load()
        .writeStream.format("tailfill_iceberg")
        .option("pipeline", cfg.to_json())
        .option("runId", req.run_id)
        .option("dataLocation", data_table.location())
        .option("quarantineLocation", quarantine_table.location())
        .option("reportPath", str(report_path(cfg, req)))
        .option("checkpointLocation", str(req.checkpoint))
    )
    if req.trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{req.trigger_interval_seconds} seconds")
    query = writer.start()
    started, printed, printed_at = time.monotonic(), -1, 0.0
    try:
        while not query.awaitTermination(1.0):
            if req.stop_after_seconds is not None and time.monotonic() - started >= req.stop_after_seconds:
                _stop_between_batches(query)
                log(f"[{req.label}] stopped after {req.stop_after_seconds:.0f}s as asked")
                continue
            done = read_batches(report_path(cfg, req))
            if len(done) != printed or time.monotonic() - printed_at >= 15.0:  # per batch, or a heartbeat
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
    """Run ``req`` to completion (availableNow) or until interrupted (processing time)."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    req.checkpoint.parent.mkdir(parents=True, exist_ok=True)
    result = IngestResult(req.run_id, req.label)
    tables = ensure_tables(cfg)
    data_table = tables[0]
    _retire_stale_checkpoint(req, read_ledger(data_table).committed, log)
    started = time.monotonic()
    consecutive = 0
    while True:
        data_table.refresh()
        before = read_ledger(data_table).committed
        try:
            _run_query(spark, cfg, req, tables, log)
            break
        except StreamingQueryException as exc:
            kind, message = explain(exc)
            cause = f"{kind}: {message}"
            result.causes.append(cause)
            if kind in FATAL:
                raise IngestError(f"[{req.label}] {cause}") from None
            data_table.refresh()
            advanced = subtract(read_ledger(data_table).committed, before)
            consecutive = 0 if advanced else consecutive + 1
            if consecutive > req.max_consecutive_failures:
                raise IngestError(
                    f"[{req.label}] {consecutive} consecutive failed attempts without committing any offset "
                    f"(tolerated: {req.max_consecutive_failures}); last cause: {cause}"
                ) from None
            result.restarts += 1
            log(f"[{req.label}] batch failed ({consecutive}/{req.max_consecutive_failures} tolerated): {cause}; "
                "restarting from the checkpoint")
    result.seconds = time.monotonic() - started
    for b in read_batches(report_path(cfg, req)):
        result.batches += 1
        result.offsets += b["offsets"]
        result.rows += b["rows"]
        result.quarantined += b["quarantined"]
        result.skipped_offsets += b["offsets"] if not b["committed"] else 0
    return result
