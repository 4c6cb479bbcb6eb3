"""Finding the root cause inside the text of a Spark streaming failure, and whether a restart can help."""

import pytest

from tailfill.errors import is_retryable
from tailfill.run.spark_ingest import explain

COMMIT_FAILURE = """[STREAM_FAILED] Query [id = 1] terminated with exception: \
[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform commit: \
Traceback (most recent call last):
  File "/x/iceberg_sink.py", line 146, in commit
    faults.maybe_fail("before-commit")
tailfill.faults.InjectedFault: injected failure at before-commit (1 more armed)
 SQLSTATE: 38000
org.apache.spark.SparkException: Job aborted
"""

CHAINED = """Failed: Traceback (most recent call last):
  File "a.py", line 1, in f
ValueError: streaming from Kafka needs explicit startingOffsets
During handling of the above exception, another exception occurred:
Traceback (most recent call last):
UnboundLocalError: cannot access local variable 'reader'
"""

FATAL_LATER = """Traceback (most recent call last):
KafkaException: transport
tailfill.kafka_client.ExpiredOffsetsError: offsets t[0] [0, 10) are no longer in the topic
"""


def test_the_python_exception_is_the_cause_not_the_spark_wrapper():
    assert explain(Exception(COMMIT_FAILURE)) == ("InjectedFault", "injected failure at before-commit (1 more armed)")


def test_the_first_exception_of_a_chain_is_the_root():
    assert explain(Exception(CHAINED))[0] == "ValueError"


def test_a_fatal_tailfill_error_wins_so_the_run_stops_at_once():
    assert explain(Exception(FATAL_LATER)) == ("ExpiredOffsetsError", "offsets t[0] [0, 10) are no longer in the topic")


WORKER_FAILURE = """[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function.
Traceback (most recent call last):
  File "/x/py4j/clientserver.py", line 644, in _call_proxy
pyspark.errors.exceptions.captured.PythonException: An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/x/tailfill/lake/files.py", line 45, in close
OSError: When uploading part for key 'w/data/x.parquet' in bucket 'b': AWS Error INTERNAL_FAILURE during \
UploadPart
"""


def test_an_executor_s_exception_is_the_cause_not_the_python_worker_wrapper():
    kind, message = explain(Exception(WORKER_FAILURE))
    assert kind == "OSError" and message.startswith("When uploading part for key 'w/data/x.parquet'")


def test_text_without_traceback_falls_back_to_first_line():
    assert explain(RuntimeError("boom\nmore")) == ("RuntimeError", "boom")


@pytest.mark.parametrize(("cause", "retryable"), [
    ("InjectedFault", True),  # a transient failure a test injects
    ("SourceError", True),  # broker unreachable: it may come back
    ("CommitConflictError", True),  # other writers were first: try again
    ("ExpiredOffsetsError", False),  # retention removed them: no restart brings them back
    ("DroppedRecordsError", False),  # a writer bug: replaying would drop them again
    ("ConfigError", False),
    ("LakeError", False),
    ("Py4JNetworkError", True),  # not ours: within the failure budget
])
def test_the_cause_s_class_says_whether_a_restart_can_help(cause, retryable):
    assert is_retryable(cause) is retryable
