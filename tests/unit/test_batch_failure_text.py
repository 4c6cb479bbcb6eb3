"""What a failed batch hands back to Spark, and how the poll loop tells a stalled query from a quiet one.

Spark checks the text of a failure met after a stop with a regular expression that recurses once per
character; a few thousand characters (a Python traceback carrying a cancelled job's JVM stack) overflowed
the stream thread's stack, the thread died without a cause and the run looked finished. A failed batch
therefore hands Spark one short line, and keeps the failure itself, as data, for the restart policy.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

from tailfill.errors import BatchFailed, ErrorInfo
from tailfill.run.batch import SHORT_FAILURE_CHARS, BatchHandler, short_failure
from tailfill.run.plan import IngestRequest
from tailfill.run.poll import StallWatch
from tailfill.run.query_state import QueryState, Tally
from tailfill.run.restarts import Failure

JVM_STACK = "\n".join(f"\tat org.apache.spark.scheduler.DAGScheduler.method{i}(DAGScheduler.scala:{i})"
                      for i in range(400))


class Py4JJavaError(Exception):
    """Stands in for py4j's: its text is the JVM's, thousands of characters long."""


def _cancelled_job() -> None:
    raise Py4JJavaError("An error occurred while calling o231.collectToPython.\n: org.apache.spark.SparkException: "
                        "Job 12 cancelled part of cancelled job group\n" + JVM_STACK)


class _TablesRaise:
    """A committer whose tables raise what a cancelled Spark job raises (the first thing a batch touches)."""

    @property
    def tables(self):
        try:
            _cancelled_job()
        except Py4JJavaError as exc:
            raise RuntimeError("while preparing the batch") from exc


def _handler(state: QueryState) -> BatchHandler:
    req = IngestRequest("demo tail", None, None, 1000, 3, 1.0, Path("/nonexistent"), "run-1")  # type: ignore[arg-type]
    return BatchHandler(req, "{}", _TablesRaise(), None, None, Path("/nonexistent"), state)  # type: ignore[arg-type]


def _text_py4j_sends(handler: BatchHandler) -> str:
    """What py4j's callback server returns to the JVM for a failing ``foreachBatch``: ``traceback.format_exc()``."""
    try:
        handler(None, 12)  # type: ignore[arg-type]
    except Exception:
        return traceback.format_exc()
    raise AssertionError("the batch did not fail")


def test_a_failed_batch_sends_spark_one_short_line_and_keeps_the_failure_as_data():
    state = QueryState(Tally())
    text = _text_py4j_sends(_handler(state))
    assert len(text) < 2_000, text  # Spark's pattern overflowed from about 2,000 characters
    assert "DAGScheduler" not in text  # no JVM stack: the cause stays on the driver
    assert "BatchFailed: batch 12 failed at prepare (read, parse, write on the executors) of batch 12" in text
    # The restart policy still gets what happened, from the root of the chain.
    assert state.failure is not None
    assert state.failure.error.error_class == "Py4JJavaError"
    assert state.failure.error.message == ("org.apache.spark.SparkException: Job 12 cancelled part of cancelled "
                                           "job group")  # the JVM's cause, not py4j's "while calling o231"
    assert state.failure.step == "prepare (read, parse, write on the executors) of batch 12"


def test_a_batch_stopped_mid_way_is_logged_in_one_line_not_a_traceback(caplog):
    state = QueryState(Tally())
    state.stopping.set()
    with caplog.at_level("WARNING", logger="tailfill.run.batch"):
        _text_py4j_sends(_handler(state))
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is None
    assert "the query was stopped" in caplog.records[0].getMessage()


def test_the_short_line_is_capped_and_on_one_line():
    failure = Failure(ErrorInfo("OSError", "x" * 5_000 + "\nsecond line"), "commit of batch 3")
    error = short_failure(3, failure, OSError("x"), stopping=True)
    assert isinstance(error, BatchFailed)
    assert len(str(error)) == SHORT_FAILURE_CHARS and "\n" not in str(error)
    assert str(error).startswith("batch 3 failed at commit of batch 3: OSError: xxx")


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("busy", [True, False])
def test_a_query_is_stuck_only_when_busy_without_a_batch_ending_for_longer_than_the_timeout(busy):
    clock = _Clock()
    watch = StallWatch(60, progress=100.0, now=clock)
    clock.now = 59
    assert watch.stuck(100.0, busy=busy) is None
    clock.now = 61
    assert (watch.stuck(100.0, busy=busy) is not None) is busy  # idle (nothing to read) is never a stall


def test_a_batch_ending_or_an_idle_moment_starts_the_count_again():
    clock = _Clock()
    watch = StallWatch(60, progress=100.0, now=clock)
    clock.now = 50
    assert watch.stuck(150.0, busy=True) is None  # a batch ended
    clock.now = 100
    assert watch.stuck(150.0, busy=True) is None  # busy for 50 s since
    clock.now = 111
    assert watch.stuck(150.0, busy=True) == pytest.approx(61)
    assert watch.stuck(150.0, busy=False) is None  # idle: alive
    clock.now = 160
    assert watch.stuck(150.0, busy=True) is None


def test_requests_without_a_stall_timeout_never_stall():
    clock = _Clock()
    watch = StallWatch(None, progress=0.0, now=clock)
    clock.now = 10_000
    assert watch.stuck(0.0, busy=True) is None



TASK_FAILED = """An error occurred while calling o600.getResult.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most \
recent failure: Lost task 0.0 in stage 3.0 (TID 5) (127.0.0.1 executor driver): \
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pyspark/worker.py", line 1900, in main
    process()
  File "/work/tailfill/lake/prepare.py", line 135, in write_range
    raise OSError("no space left")
OSError: no space left

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/work/tailfill/lake/prepare.py", line 140, in write_range
    raise DiskFullError(path)
tailfill.errors.DiskFullError: the disk is full: could not write a data file file:///w/x.parquet
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:624)
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2900)
"""


def test_a_task_that_failed_in_python_is_named_by_the_exception_its_worker_raised():
    error = ErrorInfo.of(Py4JJavaError(TASK_FAILED + JVM_STACK))
    assert error.error_class == "Py4JJavaError"
    assert error.message == ("tailfill.errors.DiskFullError: the disk is full: could not write a data file "
                             "file:///w/x.parquet")


def test_a_jvm_error_without_a_python_traceback_is_named_by_its_first_line():
    error = ErrorInfo.of(Py4JJavaError("An error occurred while calling o12.save.\n: java.io.IOException: "
                                       "Mkdirs failed to create /w\n" + JVM_STACK))
    assert error.message == "java.io.IOException: Mkdirs failed to create /w"
    assert ErrorInfo.of(Py4JJavaError("An error occurred while calling o12.save.")).message == (
        "An error occurred while calling o12.save.")
