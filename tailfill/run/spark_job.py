"""The Spark job behind ``spark_jobs/ingest.py``: a backfill's planned slices, or the tail.

Prints progress to stderr and, last, one ``TAILFILL_RESULT [...]`` line to stdout; exits 2 with
the cause on stderr when the run cannot complete.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from tailfill.config import resolve_pipeline
from tailfill.errors import TailfillError
from tailfill.run.plan import backfill_requests, source_state, tail_request
from tailfill.run.spark_ingest import run_ingest
from tailfill.run.spark_session import get_session
from tailfill.run.submit import IngestResult, JobSpec, results_line


def run(spec: JobSpec, spark: SparkSession | None = None) -> list[IngestResult]:
    """Run ``spec``; returns one :class:`IngestResult` per streaming query (slice, or the tail)."""
    state = source_state(resolve_pipeline(spec.pipeline))
    if spec.mode == "backfill":
        requests = backfill_requests(state, list(spec.slices), spec.run_id, spec.max_offsets_per_batch)
    else:
        requests = [tail_request(state, spec.run_id, spec.once, spec.stop_after_seconds, spec.max_offsets_per_batch)]
    if not requests:
        return []
    spark = spark or get_session(app_name=f"tailfill-{state.cfg.name}-{spec.mode}")
    return [run_ingest(spark, state.cfg, req) for req in requests]


def main(argv: list[str] | None = None) -> int:
    spec = JobSpec.parse(argv)
    try:
        results = run(spec)
    except (TailfillError, ValueError) as exc:  # ValueError: malformed offsets
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    print(results_line(results), flush=True)
    return 0
