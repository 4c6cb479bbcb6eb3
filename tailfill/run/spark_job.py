"""The Spark job behind ``spark_jobs/ingest.py``: a backfill's planned slices, or the tail.

Prints progress to stderr; its events (:mod:`tailfill.run.contract`: a restart) and, last, its
:class:`~tailfill.run.contract.JobResult` go to stdout, one line each. When the run cannot complete it
also prints the cause on stderr (``error: …``), puts it in the result as data (its class, message,
fix), and exits 2.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import replace

from pyspark.sql import SparkSession

from tailfill.errors import ConfigError, ErrorInfo, LakeError, TailfillError
from tailfill.pipeline.handle import open_pipeline
from tailfill.redact import redact_text
from tailfill.run.contract import IngestResult, JobResult, JobSpec, Restarted, parse_together
from tailfill.run.plan import backfill_requests, source_state, tail_request
from tailfill.run.spark_connect import session_cores
from tailfill.run.spark_ingest import Emit, Log, run_ingest
from tailfill.run.spark_prepare import warm_executors


def run(spec: JobSpec, spark: SparkSession | Future[SparkSession], log: Log | None = None, emit: Emit | None = None,
        cancel: threading.Event | None = None) -> list[IngestResult]:
    """Run ``spec``; returns one :class:`IngestResult` per streaming query (run of adjacent slices, or the tail).

    ``spark``: the session (tests share one; a Spark Connect job's), or one being built for a new
    application (see ``spark_jobs/ingest.py``), whose executors are warmed while the first query
    starts; the broker and the table are read meanwhile. ``log`` takes the job's progress lines
    (default: stderr), ``emit`` its events (default: their lines on stdout); ``cancel``, once set, stops
    the job's query at once (see :func:`~tailfill.run.spark_ingest.run_ingest`).
    """
    with open_pipeline(spec.pipeline) as pipeline:
        tables = pipeline.open_tables()
        if tables is None:
            raise LakeError(f"the tables of pipeline {pipeline.name} do not exist (fix: plan the run with "
                            "`tailfill backfill|tail` or the DAG's plan task, which makes them)")
        state = source_state(pipeline, tables)
        if spec.mode == "backfill":
            requests = backfill_requests(state, list(spec.slices), spec.run_id, spec.max_offsets_per_batch,
                                          spec.max_offsets_per_second)
        else:
            if spec.cutover is None:
                raise ConfigError(f"the tail of {pipeline.name} was asked for without its cutover (fix: plan it "
                                  "with `tailfill tail` or the incremental DAG, which record the cutover)")
            requests = [tail_request(state, spec.cutover, spec.run_id, spec.once, spec.stop_after_seconds,
                                     spec.max_offsets_per_batch)]
        session = spark.result() if isinstance(spark, Future) else spark
        if isinstance(spark, Future) and requests:
            warm_executors(session, pipeline.shipped)
        return [run_ingest(session, pipeline, tables, req, log, emit, cancel) for req in requests]


def run_to_result(spec: JobSpec, spark: SparkSession | Future[SparkSession], log: Log, emit: Emit,
                  cancel: threading.Event | None = None) -> JobResult:
    """Run ``spec`` and describe it as its :class:`JobResult`; whatever stops it is logged as ``error: …``
    and becomes the result's error, as data (what ``spark-submit`` and a Spark Connect job both hand back)."""
    try:
        return JobResult(run(spec, spark, log, emit, cancel))
    except Exception as exc:
        error = ErrorInfo.of(exc)
        if isinstance(exc, TailfillError | ValueError):
            log(redact_text(f"error: {exc}"))
        else:  # not one of ours: its whole text for the job's output, one line for the result
            log(redact_text("".join(traceback.format_exception(exc)).rstrip()))
            log(redact_text(f"error: {error}"))
        return JobResult(error=error)


def main(argv: list[str] | None, spark: SparkSession | Future[SparkSession]) -> int:
    """The job's entry point: run the spec in ``argv`` (several, run at once, for jobs run together:
    :func:`~tailfill.run.contract.together_argv`); 0 on success, 2 with the cause on stderr when one failed."""
    specs = parse_together(list(sys.argv[1:] if argv is None else argv))

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def emit(event: Restarted) -> None:
        print(event.line(), flush=True)

    if len(specs) == 1:
        result = run_to_result(specs[0], spark, log, emit)
        print(result.line(), flush=True)
        return 2 if result.error else 0
    failed = False
    run_one = _at_most_cores(spark, specs, log)
    with ThreadPoolExecutor(max_workers=len(specs), thread_name_prefix="job") as pool:  # a table's job each
        runs = {pool.submit(run_one, spec, log, emit): spec for spec in specs}
        for done in as_completed(runs):
            result = replace(done.result(), run_id=runs[done].run_id)
            print(result.line(), flush=True)
            failed = failed or result.error is not None
    return 2 if failed else 0


def _at_most_cores(spark: SparkSession | Future[SparkSession], specs: list[JobSpec],
                   log: Log) -> Callable[[JobSpec, Log, Emit], JobResult]:
    """How jobs run together run: every tail at once (each runs until stopped), backfills as many at a time as
    the application has cores. Measured when each job ran a streaming query, whose start costs Python processes of
    its own: 20 tables of 50,000 offsets, 2 cores, 36.6 s all at once, 29.4 s two at a time. Jobs that plan their
    own batches (:mod:`tailfill.run.direct_query`) start no such processes; the cap was not measured again."""
    session = spark.result() if isinstance(spark, Future) else spark
    cores = max(1, session_cores(session))
    backfills = sum(1 for spec in specs if spec.mode == "backfill")
    if backfills > cores:
        log(f"{backfills} backfill jobs run {cores} at a time (the application's cores); the others wait their turn")
    slots = threading.BoundedSemaphore(cores)

    def run_one(spec: JobSpec, log: Log, emit: Emit) -> JobResult:
        if spec.mode != "backfill":
            return run_to_result(spec, spark, log, emit)
        with slots:
            return run_to_result(spec, spark, log, emit)

    return run_one
