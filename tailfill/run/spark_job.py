"""The Spark job behind ``spark_jobs/ingest.py``: a backfill's planned slices, or the tail.

Prints progress to stderr and, last, one ``TAILFILL_RESULT {...}`` line to stdout: the run's
:class:`~tailfill.run.submit.JobResult` as one JSON document. When the run cannot complete it also
prints the cause on stderr (``error: …``), puts it in the document with its error class, and exits 2.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future

from pyspark.sql import SparkSession

from tailfill.config import resolve_pipeline
from tailfill.errors import TailfillError
from tailfill.lake.spark_writer import warm_executors
from tailfill.redact import redact_text
from tailfill.run.plan import backfill_requests, source_state, tail_request
from tailfill.run.spark_ingest import run_ingest
from tailfill.run.submit import IngestResult, JobResult, JobSpec


def run(spec: JobSpec, spark: SparkSession | Future[SparkSession], log: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None) -> list[IngestResult]:
    """Run ``spec``; returns one :class:`IngestResult` per streaming query (run of adjacent slices, or the tail).

    ``spark``: the session (tests and the warm Spark server share one), or one being built for a new
    application (see ``spark_jobs/ingest.py``), whose executors are warmed while the first query
    starts; the broker and the table are read meanwhile. ``log`` takes the job's progress lines
    (default: stderr); ``cancel``, once set, stops the job's query at once (see
    :func:`~tailfill.run.spark_ingest.run_ingest`).
    """
    cfg = resolve_pipeline(spec.pipeline)
    state = source_state(cfg)
    if spec.mode == "backfill":
        requests = backfill_requests(state, list(spec.slices), spec.run_id, spec.max_offsets_per_batch,
                                      spec.max_offsets_per_second)
    else:
        requests = [tail_request(state, spec.run_id, spec.once, spec.stop_after_seconds, spec.max_offsets_per_batch)]
    session = spark.result() if isinstance(spark, Future) else spark
    if isinstance(spark, Future) and requests:
        warm_executors(session, state.cfg)
    return [run_ingest(session, state.cfg, req, log, cancel) for req in requests]


def run_to_result(spec: JobSpec, spark: SparkSession | Future[SparkSession], log: Callable[[str], None],
                  cancel: threading.Event | None = None) -> JobResult:
    """Run ``spec`` and describe it as its :class:`JobResult`; a Tailfill error is logged as ``error: …``
    and becomes the result's cause (what ``spark-submit`` and the warm Spark server both hand back)."""
    try:
        return JobResult(run(spec, spark, log, cancel))
    except (TailfillError, ValueError) as exc:  # ValueError: malformed offsets
        log(redact_text(f"error: {exc}"))
        return JobResult(error=redact_text(str(exc)), error_class=type(exc).__name__)


def main(argv: list[str] | None, spark: SparkSession | Future[SparkSession]) -> int:
    """The job's entry point: run the spec in ``argv``; 0 on success, 2 with the cause on stderr."""
    result = run_to_result(JobSpec.parse(argv), spark, lambda line: print(line, file=sys.stderr, flush=True))
    print(result.line(), flush=True)
    return 2 if result.error else 0
