"""Errors as data, and the restart policy that reads them.

Whatever stops a batch reaches the restart loop as an :class:`ErrorInfo` — raised in the driver's batch
handler, on an executor (handed back with the task's output), or in the source's planning (handed
over in a file) — never as a traceback to be read back. The policy is pure: values in, a decision out.
"""

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from confluent_kafka import KafkaError, KafkaException

from tailfill import errors
from tailfill import failpoints as faults
from tailfill.errors import ErrorInfo, RemoteError
from tailfill.lake.files import FileSet
from tailfill.lake.prepare import failed, from_arrow
from tailfill.offsets import OffsetRange, PartitionOffsets
from tailfill.run.restarts import PLANNING, Failure, RestartPolicy
from tailfill.source.handoff import report_failure, reported_failure

# Spark's own wording when it could not start a Python worker in time (captured from a failed query).
WORKER_TIMEOUT = ("[STREAM_FAILED] Query [id = 0980, runId = 3a0a] terminated with exception: Job aborted due to "
                  "stage failure: Task 0 in stage 3.0 failed 1 times\norg.apache.spark.SparkException: Python worker "
                  "failed to connect back.\n\tat org.apache.spark.api.python.PythonWorkerFactory.createSimpleWorker")


def raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError(f"{fn} raised nothing")


def test_a_tailfill_error_travels_as_its_class_message_retryable_and_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_FAULT_DIR", str(tmp_path))
    (tmp_path / "fail-before-commit").write_text("2")
    info = ErrorInfo.of(raised(lambda: faults.maybe_fail("before-commit")))
    assert (info.error_class, info.message, info.retryable) == ("InjectedFault",
                                                               "injected failure at before-commit (1 more armed)", True)
    assert ErrorInfo.from_dict(info.to_dict()) == info


def test_the_first_exception_of_a_chain_is_the_root():
    def handle() -> None:
        try:
            PartitionOffsets.from_json("[1, 2]")
        except ValueError:
            del missing  # noqa: F821 - fails while handling the first one
            missing = 1  # noqa: F841

    info = ErrorInfo.of(raised(handle))
    assert (info.error_class, info.message) == ("ValueError", "offsets must be a JSON object, got '[1, 2]'")


def test_a_fatal_tailfill_error_wins_over_the_foreign_root_so_the_run_stops_at_once():
    def read() -> None:
        try:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "transport"))
        except KafkaException as exc:
            raise errors.ExpiredOffsetsError(OffsetRange("t", 0, 0, 10), 10) from exc

    info = ErrorInfo.of(raised(read))
    assert info.error_class == "ExpiredOffsetsError" and not info.retryable and not info.then_resume
    assert info.message.startswith("offsets t[0] [0, 10) are no longer in the topic (earliest available is 10)")
    _, decision = RestartPolicy(3, 1.0).start().after(Failure(info))
    assert decision.stop == str(info)


def test_an_executor_s_exception_comes_back_as_the_error_it_was(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    files = FileSet(pafs.LocalFileSystem(), str(not_a_dir / "table"), pa.schema([("a", pa.int64())]), "r1")
    task = failed(ErrorInfo.of(raised(lambda: files.write(pa.table({"a": [1]})))))  # what the task hands back
    again = raised(lambda: from_arrow(pa.Table.from_batches([task])))
    assert isinstance(again, RemoteError) and again.retryable
    info = ErrorInfo.of(again)
    assert info.error_class == "NotADirectoryError"
    assert info.message.startswith(f"[Errno 20] Cannot create directory '{not_a_dir}")


def test_the_source_s_planning_failure_is_handed_over_once(tmp_path):
    path = tmp_path / "failure.json"
    assert reported_failure(path) is None
    info = ErrorInfo.of(errors.ExpiredOffsetsError(OffsetRange("t", 1, 5, 9), 9))
    report_failure(path, info)
    assert reported_failure(path) == info
    assert reported_failure(path) is None  # taken


def test_foreign_errors_are_retried_within_the_budget_with_their_library_s_fix():
    broker = ErrorInfo.of(KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")))
    assert broker.retryable and broker.fix == errors.BrokerError.fix
    spark = ErrorInfo.foreign("StreamingQueryException", "[STREAM_FAILED] boom\nmore")
    assert (spark.message, spark.retryable, spark.infrastructure) == ("[STREAM_FAILED] boom", True, False)


@pytest.mark.parametrize(("cause", "retryable"), [
    (errors.InjectedFault("x"), True),  # a transient failure a test injects
    (errors.SourceError("x"), True),  # broker unreachable: it may come back
    (errors.CommitConflictError("x"), True),  # other writers were first: try again
    (errors.ExpiredOffsetsError(OffsetRange("t", 0, 0, 1), 1), False),  # retention removed them
    (errors.DroppedRecordsError("x"), False),  # a writer bug: replaying would drop them again
    (errors.ConfigError("x"), False),
    (errors.LakeError("x"), False),
    (ConnectionResetError("x"), True),  # not ours: within the failure budget
])
def test_the_error_says_whether_a_restart_can_help(cause, retryable):
    assert ErrorInfo.of(cause).retryable is retryable


def fault(step: str = "commit of batch 3", advanced: bool = False) -> Failure:
    return Failure(ErrorInfo.of(errors.InjectedFault("boom")), step, advanced)


def test_restarts_wait_longer_after_each_failure_then_stop_naming_the_step():
    restarts = RestartPolicy(tolerated=3, backoff_seconds=2.0).start()
    waits = []
    for _ in range(3):
        restarts, decision = restarts.after(fault())
        assert decision.stop is None
        waits.append((decision.failures, decision.wait_seconds))
    assert waits == [(1, 2.0), (2, 4.0), (3, 8.0)]
    _, last = restarts.after(fault())
    assert last.stop == ("4 consecutive failed attempts without committing any offset (tolerated: 3), each at the "
                         "same step: commit of batch 3; last cause: InjectedFault: boom")


def test_failures_at_different_steps_are_all_named_and_the_wait_is_capped():
    restarts = RestartPolicy(tolerated=1, backoff_seconds=50.0).start()
    restarts, first = restarts.after(fault(PLANNING))
    _, second = restarts.after(fault())
    assert first.wait_seconds == 50.0 and second.stop is not None
    assert f"at: {PLANNING}; commit of batch 3;" in second.stop
    restarts = RestartPolicy(tolerated=9, backoff_seconds=50.0).start()
    restarts, _ = restarts.after(fault())
    assert restarts.after(fault())[1].wait_seconds == 60.0  # never more than a minute


def test_an_attempt_that_committed_a_batch_does_not_count_and_starts_the_count_again():
    restarts = RestartPolicy(tolerated=1, backoff_seconds=1.0).start()
    restarts, _ = restarts.after(fault())
    restarts, decision = restarts.after(fault(advanced=True))
    assert (decision.failures, decision.stop, decision.wait_seconds) == (0, None, 1.0)
    restarts, decision = restarts.after(fault())
    assert decision.stop is None  # one in a row again: tolerated
    assert RestartPolicy(tolerated=0, backoff_seconds=1.0).start().after(fault(advanced=True))[1].stop is None


def test_spark_failing_to_start_a_python_worker_has_its_own_patience():
    worker = Failure(ErrorInfo.foreign("StreamingQueryException", WORKER_TIMEOUT), PLANNING)
    assert worker.error.infrastructure and worker.error.message == ("org.apache.spark.SparkException: Python worker "
                                                                    "failed to connect back.")
    restarts = RestartPolicy(tolerated=0, backoff_seconds=1.0).start()  # not one bad batch tolerated
    waits = []
    for _ in range(5):
        restarts, decision = restarts.after(worker)
        assert decision.stop is None
        waits.append(decision.wait_seconds)
    assert waits == [15.0, 30.0, 60.0, 120.0, 120.0]  # a longer backoff than a batch's
    _, decision = restarts.after(worker)
    assert decision.stop is not None and "Python worker failed to connect back" in decision.stop
    assert ErrorInfo.of(RuntimeError(WORKER_TIMEOUT)).infrastructure  # seen inside a handler's error too


def test_a_catalog_unreachable_at_commit_is_waited_out_with_the_infrastructure_patience():
    try:
        try:
            raise OSError("server closed the connection unexpectedly")
        except OSError as cause:
            raise errors.CatalogUnreachable("the catalog of p could not be reached to commit batch 1") from cause
    except errors.CatalogUnreachable as exc:
        info = ErrorInfo.of(exc)
    assert (info.error_class, info.retryable, info.infrastructure) == ("CatalogUnreachable", True, True)
    restarts = RestartPolicy(tolerated=0, backoff_seconds=1.0).start()  # not one bad batch tolerated
    restarts, decision = restarts.after(Failure(info, "commit of batch 1"))
    assert (decision.stop, decision.wait_seconds) == (None, 15.0)


def test_only_a_passing_catalog_error_counts_as_unreachable(tmp_path):
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from tailfill.lake.commit import catalog_unreachable

    def sqlalchemy_error(cause: Exception) -> OperationalError:
        return OperationalError("UPDATE iceberg_tables ...", {}, cause)

    assert catalog_unreachable(sqlalchemy_error(sqlite3.OperationalError("database is locked")))
    assert catalog_unreachable(sqlalchemy_error(OSError("server closed the connection unexpectedly")))  # Postgres
    with pytest.raises(sqlite3.OperationalError) as cannot_open:  # not waited out: the commit fails at once
        sqlite3.connect(tmp_path / "missing" / "catalog.db")
    assert not catalog_unreachable(sqlalchemy_error(cannot_open.value))
    assert not catalog_unreachable(ValueError("a commit's own error"))


def broker_down(step: str = PLANNING) -> Failure:
    info = ErrorInfo.of(errors.BrokerUnresponsive("the broker at 127.0.0.1:9092 answered no fetch for 15s"))
    return Failure(info, step)


def test_a_dead_broker_spends_one_allowance_per_run_that_batch_failures_do_not_give_back():
    restarts = RestartPolicy(tolerated=3, backoff_seconds=2.0, ceiling_seconds=1e9).start()  # no ceiling in the way
    kinds = []
    for _ in range(20):
        restarts, decision = restarts.after(broker_down())
        kinds.append(decision.tolerated)
        if decision.stop is not None:
            break
    # the infrastructure's 5, then the batch's 3 tolerated, and the next stops: no second allowance of 5
    assert kinds == [5, 5, 5, 5, 5, 3, 3, 3, 3] and decision.stop is not None
    assert decision.stop.startswith("4 consecutive failed attempts") and "BrokerUnresponsive" in decision.stop


def test_a_commit_gives_the_allowance_back():
    restarts = RestartPolicy(tolerated=0, backoff_seconds=1.0).start()
    for _ in range(5):
        restarts, decision = restarts.after(broker_down())
    restarts, decision = restarts.after(Failure(broker_down().error, PLANNING, advanced=True))
    restarts, decision = restarts.after(broker_down())
    assert (decision.stop, decision.failures, decision.wait_seconds) == (None, 1, 15.0)


def test_the_ceiling_stops_a_run_that_commits_nothing_naming_how_long_it_tried_and_the_cause():
    restarts = RestartPolicy(tolerated=3, backoff_seconds=2.0, ceiling_seconds=240.0).start()
    clock, waits = 1_000.0, []
    while True:
        restarts, decision = restarts.after(broker_down(), clock)
        if decision.stop is not None:
            break
        waits.append(decision.wait_seconds)
        clock += decision.wait_seconds + 15.0  # the next attempt notices the dead broker 15 s after it starts
    assert waits == [15.0, 30.0, 60.0, 90.0]  # the last restart starts at the ceiling (240 s), not 30 s past it
    assert clock - 1_000.0 == 255.0  # its failure, 15 s later, stops the run
    assert decision.stop == ("gave up after 255s of failed attempts without committing any offset "
                             "(retry_ceiling_seconds: 240; 5 attempts failed); last cause: BrokerUnresponsive: the "
                             "broker at 127.0.0.1:9092 answered no fetch for 15s")


def test_the_ceiling_counts_from_the_first_failure_since_the_last_commit_for_failures_of_any_kind():
    restarts = RestartPolicy(tolerated=9, backoff_seconds=5.0, ceiling_seconds=20.0).start()
    restarts, first = restarts.after(fault(), 100.0)
    restarts, second = restarts.after(fault(), 118.0)
    assert (first.wait_seconds, second.wait_seconds) == (5.0, 2.0)  # a store's failures are capped alike
    restarts, moved = restarts.after(fault(advanced=True), 130.0)  # it committed: the count starts at this failure
    assert moved.stop is None
    _, later = restarts.after(fault(), 149.0)
    assert later.stop is None and later.wait_seconds == 1.0
    assert restarts.after(fault(), 150.0)[1].stop.startswith("gave up after 20s of failed attempts")
