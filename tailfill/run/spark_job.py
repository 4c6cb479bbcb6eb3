"""The Spark job behind ``spark_jobs/ingest.py``: a backfill's planned slices, or the tail.

Prints progress to stderr and, last, one ``TAILFILL_RESULT {...}`` line to stdout: the run's
:class:`~tailfill.run.submit.JobResult` as one JSON document. When the run cannot complete it also
prints the cause on stderr (``error: …``), puts it in the document with its error class, and exits 2.
"""

from __future__ import annotations

import sys
from concurrent.futures import Future

from pyspark.sql import SparkSession

from tailfill.config import resolve_pipeline
from tailfill.errors import TailfillError
from tailfill.lake.spark_writer import warm_executors
from tailfill.redact import redact_text
from tailfill.run.plan import backfill_requests, source_state, tail_request
from tailfill.run.spark_ingest import run_ingest
from tailfill.run.submit import IngestResult, JobResult, JobSpec


def run(spec: JobSpec, spark: SparkSession | Future[SparkSession]) -> list[IngestResult]:
    """Run ``spec``; returns one :class:`IngestResult` per streaming query (run of adjacent slices, or the tail).

    ``spark``: the session (tests share one), or one being built for a new application (see
    ``spark_jobs/ingest.py``), whose executors are warmed while the first query starts; the broker
    and the table are read meanwhile.
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
    return [run_ingest(session, state.cfg, req) for req in requests]


def main(argv: list[str] | None, spark: SparkSession | Future[SparkSession]) -> int:
    """The job's entry point: run the spec in ``argv``; 0 on success, 2 with the cause on stderr."""
    spec = JobSpec.parse(argv)
    try:
        results = run(spec, spark)
    except (TailfillError, ValueError) as exc:  # ValueError: malformed offsets
        print(redact_text(f"error: {exc}"), file=sys.stderr, flush=True)
        print(JobResult(error=redact_text(str(exc)), error_class=type(exc).__name__).line(), flush=True)
        return 2
    print(JobResult(results).line(), flush=True)
    return 0
