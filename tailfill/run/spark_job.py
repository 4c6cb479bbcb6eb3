"""The Spark job behind ``spark_jobs/ingest.py``: a backfill's planned slices, or the tail.

Prints progress to stderr; its events (:mod:`tailfill.run.contract`: a restart) and, last, its
:class:`~tailfill.run.contract.JobResult` go to stdout, one line each. When the run cannot complete it
also prints the cause on stderr (``error: …``), puts it in the result as data (its class, message,
fix), and exits 2.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import traceback
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import replace

from pyspark.sql import SparkSession

from tailfill.errors import ConfigError, ErrorInfo, LakeError, TailfillError
from tailfill.lake.spark_catalog import SPARK_CATALOG_TYPES
from tailfill.pipeline.handle import open_pipeline
from tailfill.plumbing.whole_lines import line_printer
from tailfill.redact import redact_text
from tailfill.run.contract import IngestResult, JobResult, JobSpec, Restarted, parse_together
from tailfill.run.job_stop import StopAsked, stop_of_job
from tailfill.run.plan import backfill_requests, source_state, tail_request
from tailfill.run.spark_connect import session_cores
from tailfill.run.spark_ingest import Emit, Log, run_ingest
from tailfill.run.spark_prepare import warm_executors
from tailfill.run.spark_session import add_catalog, has_iceberg
from tailfill.run.write_test import ensure_writable
from tailfill.settings import settings
from tailfill.state.tail_claim import claimed


def run(spec: JobSpec, spark: SparkSession | Future[SparkSession], log: Log | None = None, emit: Emit | None = None,
        cancel: threading.Event | None = None, together: Together | None = None,
        stop: StopAsked | None = None) -> list[IngestResult]:
    """Run ``spec``; returns one :class:`IngestResult` per streaming query (run of adjacent slices, or the tail).

    ``spark``: the session (tests share one; a Spark Connect job's), or one being built for a new
    application (see ``spark_jobs/ingest.py``), whose executors are warmed while the first query
    starts; the broker and the table are read meanwhile. ``log`` takes the job's progress lines
    (default: stderr), ``emit`` its events (default: their lines on stdout); ``cancel``, once set, stops
    the job's query at once (see :func:`~tailfill.run.spark_ingest.run_ingest`); ``stop``, once asked, ends it
    after the batch in flight, and no further query starts. ``together``: the policy of the jobs this one runs
    beside in one application (:class:`Together`).
    """
    with open_pipeline(spec.pipeline) as pipeline:
        ensure_writable(pipeline)  # this process's credentials, before anything is read (done already on Connect)
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
        if pipeline.cfg.target.catalog.type in SPARK_CATALOG_TYPES and has_iceberg(session):
            add_catalog(session, pipeline.cfg.target)  # for Spark SQL in this session; the job itself never uses it
        if isinstance(spark, Future) and requests and (together is None or together.first_to_warm()):
            warm_executors(session, pipeline.shipped)
        if together is not None:
            pipeline.release_connections()  # tables may wait their turn by the hundred: a catalog's connection each
        one_tail = claimed(pipeline.state, pipeline.name, spec.run_id, log or line_printer(sys.stderr)) \
            if spec.mode == "tail" else contextlib.nullcontext()  # one tail per pipeline: this process's while it runs
        with together.slot(spec, session) if together else contextlib.nullcontext(), one_tail:
            results = []
            for req in requests:
                if stop is not None and stop.asked:
                    break
                results.append(run_ingest(session, pipeline, tables, req, log, emit, cancel, stop))
            return results


def run_to_result(spec: JobSpec, spark: SparkSession | Future[SparkSession], log: Log, emit: Emit,
                  cancel: threading.Event | None = None, together: Together | None = None,
                  stop: StopAsked | None = None) -> JobResult:
    """Run ``spec`` and describe it as its :class:`JobResult`; whatever stops it is logged as ``error: …``
    and becomes the result's error, as data (what ``spark-submit`` and a Spark Connect job both hand back)."""
    try:
        return JobResult(run(spec, spark, log, emit, cancel, together, stop))
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

    with stop_of_job(settings().stop_file) as stop:  # its caller's file, or SIGTERM/SIGINT to this process
        return _main(specs, spark, stop)


def _main(specs: list[JobSpec], spark: SparkSession | Future[SparkSession], stop: StopAsked) -> int:
    """:func:`main`'s specs run, each stopped between batches once ``stop`` is asked."""
    log, out = line_printer(sys.stderr), line_printer(sys.stdout)  # jobs run together print from threads

    def emit(event: Restarted) -> None:
        out(event.line())

    if len(specs) == 1:
        result = run_to_result(specs[0], spark, log, emit, stop=stop)
        out(result.line())
        return 2 if result.error else 0
    failed = False
    backfills = sum(1 for spec in specs if spec.mode == "backfill")
    together = Together(backfills, log, 1 if settings().bounded_as_query else BACKFILLS_PER_CORE)
    with ThreadPoolExecutor(max_workers=len(specs), thread_name_prefix="job") as pool:  # a table's job each
        runs = {pool.submit(run_to_result, spec, spark, log, emit, None, together, stop): spec for spec in specs}
        for done in as_completed(runs):
            result = replace(done.result(), run_id=runs[done].run_id)
            out(result.line())
            failed = failed or result.error is not None
    return 2 if failed else 0


BACKFILLS_PER_CORE = 4  # 20 tables of 50,000 offsets on 2 cores: about 1.6 x one topic's time with 1, 1.4 with 4


class Together:
    """The policy of jobs run together by one application (a table each).

    Each job opens its tables and reads its source at once (over a new application, while its JVM starts). To
    ingest, every tail goes ahead (each runs until stopped), and backfills take a slot each: at most ``per_core``
    × the application's cores at once. Their batches queue for the cores in Spark's scheduler, so more jobs than
    cores keep the cores busy while others plan and commit on the driver; a job that runs a streaming query starts
    Python processes of its own, and those are better one per core (``per_core=1``). The first job to start a new
    application's executors warms them, for all.
    """

    def __init__(self, backfills: int, log: Log, per_core: int = BACKFILLS_PER_CORE):
        self._backfills, self._log, self._per_core = backfills, log, per_core
        self._lock = threading.Lock()
        self._slots: threading.BoundedSemaphore | None = None
        self._warmed = False

    def first_to_warm(self) -> bool:
        """Whether the caller is the first to ask (it warms the executors)."""
        with self._lock:
            first, self._warmed = not self._warmed, True
            return first

    @contextlib.contextmanager
    def slot(self, spec: JobSpec, session: SparkSession) -> Iterator[None]:
        """Where ``spec`` ingests: a backfill waits for a free slot, a tail does not."""
        if spec.mode != "backfill":
            yield
            return
        with self._slots_of(session):
            yield

    def _slots_of(self, session: SparkSession) -> threading.BoundedSemaphore:
        with self._lock:
            if self._slots is None:
                at_once = self._per_core * max(1, session_cores(session))
                if self._backfills > at_once:
                    self._log(f"{self._backfills} backfill jobs run {at_once} at a time ({self._per_core} per core "
                              "of the application); the others wait their turn")
                self._slots = threading.BoundedSemaphore(at_once)
            return self._slots
