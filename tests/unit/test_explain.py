"""Finding the root cause inside the text of a Spark streaming failure, and whether a restart can help.

The Python tracebacks in these texts are not typed in: Python prints each for an exception the
current code raises or defines (the failpoint, a Parquet write, the offsets parser, the expired-offsets
error), so a module that moves or an exception that changes its name changes the text the parser is
tested on. Only Spark's wrapping around them is fixed text, as pyspark 4.2 prints it (captured from
real failed queries).
"""

import traceback
from collections.abc import Callable

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from confluent_kafka import KafkaError, KafkaException

from tailfill import errors
from tailfill import failpoints as faults
from tailfill.errors import is_retryable
from tailfill.lake.files import FileSet
from tailfill.offsets import OffsetRange, PartitionOffsets
from tailfill.run.spark_ingest import explain

# A foreachBatch function (the driver's prepare-and-commit) raised: the query ends with this text.
FOREACH_BATCH_FAILED = (
    "[STREAM_FAILED] Query [id = 09808b22-cdfb-4efb-844a-2f4cd77442ee, runId = 3a0a7ddd-8d89-4d61-ba9f-ab9773503a80] "
    "terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function "
    "in foreach batch sink. Reason: An exception was raised by the Python Proxy. Return Message: {traceback}"
    " SQLSTATE: 39000 SQLSTATE: XXKST\n=== Streaming Query ===\n"
    "Identifier: [id = 09808b22-cdfb-4efb-844a-2f4cd77442ee, runId = 3a0a7ddd-8d89-4d61-ba9f-ab9773503a80]\n"
    "Current State: ACTIVE\nThread State: RUNNABLE\n"
)
# A task on an executor raised inside the foreachBatch function: py4j's frames on the driver, then the worker's.
WORKER_FAILED = """Traceback (most recent call last):
  File "/x/py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
  File "/x/pyspark/sql/utils.py", line 163, in call
    self.func(DataFrame(jdf, wrapped_session_jdf), batch_id)
  File "/x/pyspark/core/rdd.py", line 1699, in collect
    sock_info = self.ctx._jvm.PythonRDD.collectAndServe(self._jrdd.rdd())
  File "/x/pyspark/errors/exceptions/captured.py", line 257, in deco
    raise converted from None
pyspark.errors.exceptions.captured.PythonException: An exception was thrown from the Python worker:
{traceback}"""


def printed(fn: Callable[[], object]) -> str:
    """The traceback Python prints for the exception ``fn()`` raises (the current code's real frames)."""
    try:
        fn()
    except Exception as exc:
        return "".join(traceback.format_exception(exc))
    raise AssertionError(f"{fn} raised nothing")


def injected_fault(tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("TAILFILL_FAULT_DIR", str(tmp_path))
    (tmp_path / "fail-before-commit").write_text("2")
    return printed(lambda: faults.maybe_fail("before-commit"))


def test_the_python_exception_is_the_cause_not_the_spark_wrapper(tmp_path, monkeypatch):
    text = FOREACH_BATCH_FAILED.format(traceback=injected_fault(tmp_path, monkeypatch))
    assert "tailfill.errors.InjectedFault: injected failure at before-commit" in text  # as Python prints it
    assert explain(Exception(text)) == ("InjectedFault", "injected failure at before-commit (1 more armed)")


def test_the_first_exception_of_a_chain_is_the_root():
    def handle() -> None:
        try:
            PartitionOffsets.from_json("[1, 2]")
        except ValueError:
            del missing  # noqa: F821 - fails while handling the first one
            missing = 1  # noqa: F841

    text = FOREACH_BATCH_FAILED.format(traceback=printed(handle))
    assert "During handling of the above exception" in text
    assert explain(Exception(text)) == ("ValueError", "offsets must be a JSON object, got '[1, 2]'")


def test_a_fatal_tailfill_error_wins_so_the_run_stops_at_once():
    def read() -> None:
        try:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "transport"))
        except KafkaException as exc:
            raise errors.ExpiredOffsetsError(OffsetRange("t", 0, 0, 10), 10) from exc

    text = FOREACH_BATCH_FAILED.format(traceback=printed(read))
    assert text.index("KafkaException") < text.index("tailfill.errors.ExpiredOffsetsError")
    kind, message = explain(Exception(text))
    assert kind == "ExpiredOffsetsError" and not is_retryable(kind)
    assert message.startswith("offsets t[0] [0, 10) are no longer in the topic (earliest available is 10)")


def test_an_executor_s_exception_is_the_cause_not_the_python_worker_wrapper(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    files = FileSet(pafs.LocalFileSystem(), str(not_a_dir / "table"), pa.schema([("a", pa.int64())]), "r1")
    worker = printed(lambda: files.write(pa.table({"a": [1]})))
    kind, message = explain(Exception(FOREACH_BATCH_FAILED.format(traceback=WORKER_FAILED.format(traceback=worker))))
    assert kind == "NotADirectoryError" and message.startswith(f"[Errno 20] Cannot create directory '{not_a_dir}")


def test_text_without_traceback_falls_back_to_first_line():
    assert explain(RuntimeError("boom\nmore")) == ("RuntimeError", "boom")


@pytest.mark.parametrize(("cause", "retryable"), [
    (errors.InjectedFault, True),  # a transient failure a test injects
    (errors.SourceError, True),  # broker unreachable: it may come back
    (errors.CommitConflictError, True),  # other writers were first: try again
    (errors.ExpiredOffsetsError, False),  # retention removed them: no restart brings them back
    (errors.DroppedRecordsError, False),  # a writer bug: replaying would drop them again
    (errors.ConfigError, False),
    (errors.LakeError, False),
    ("Py4JNetworkError", True),  # not ours: within the failure budget
])
def test_the_cause_s_class_says_whether_a_restart_can_help(cause, retryable):
    assert is_retryable(cause if isinstance(cause, str) else cause.__name__) is retryable
