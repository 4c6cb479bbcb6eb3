"""The Airflow corner's pure logic: lane labels and run ids, progress from batch reports, failure causes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
from tailfill_airflow.causes import JobOutput, committed_summary, fix_for, headline  # noqa: E402
from tailfill_airflow.naming import (  # noqa: E402
    backfill_lane_slots,
    label_of_args,
    lane_label,
    lanes_at_once,
    spark_slots,
    split_dag_id,
    tailfill_run_id,
)
from tailfill_airflow.progress import ProgressWatcher, progress  # noqa: E402

from tailfill.offsets import OffsetRange, TopicPartition  # noqa: E402
from tailfill.pipeline.load import load_pipeline  # noqa: E402
from tailfill.state.records import BatchReport  # noqa: E402
from tailfill.state.store import (  # noqa: E402
    StateStore,
    read_failures,
    report_file,
    run_reports,
)
from tailfill.values.freshness import Freshness  # noqa: E402

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def slice_dict(index: int, count: int, start: int, end: int) -> dict:
    return {"index": index, "count": count, "start": {"t": {"0": start, "1": start}},
            "end": {"t": {"0": end, "1": end}}}


def report(batch: int, at: float, start: int, end: int, quarantined: int = 0) -> BatchReport:
    n = 2 * (end - start)
    return BatchReport(batch, at, 1.0, n, n, n - quarantined, quarantined,
                       [OffsetRange.of(TP0, start, end), OffsetRange.of(TP1, start, end)])


def test_lane_label_names_slices_one_based_and_their_offsets():
    slices = [slice_dict(2, 6, 0, 100), slice_dict(3, 6, 100, 250)]
    assert lane_label(slices) == "slices 3-4 of 6 (500 offsets)"
    assert lane_label(slices[:1]) == "slice 3 of 6 (200 offsets)"
    argv = ["--pipeline", "p.yaml", "--mode", "backfill", "--slices", json.dumps(slices)]
    assert label_of_args(argv) == "slices 3-4 of 6 (500 offsets)"
    assert label_of_args(["--mode", "tail", "--once"]) == "tail"


def test_run_ids_are_stable_file_safe_and_split_back():
    assert tailfill_run_id("demo", "backfill", "manual__2026-01-01T00:00:00+00:00", 1) == \
        "af-demo-backfill-lane1-manual__2026-01-01T00-00-00-00-00"
    assert tailfill_run_id("demo", "incremental", "scheduled__x y") == "af-demo-tail-scheduled__x-y"
    assert split_dag_id("my_pipe_backfill") == ("my_pipe", "backfill")
    assert split_dag_id("my_pipe_incremental") == ("my_pipe", "incremental")
    assert split_dag_id("my_pipe_maintenance") == ("my_pipe", "maintenance")
    with pytest.raises(ValueError, match="not a Tailfill DAG"):
        split_dag_id("example_dag")


def test_pool_keeps_a_slot_for_the_incremental_dag():
    assert spark_slots({}) == 4 and backfill_lane_slots({}) == 3  # the form's three lanes beside a tail run
    assert backfill_lane_slots({"TAILFILL_SPARK_SLOTS": "5"}) == 4
    with pytest.raises(ValueError, match=r"TAILFILL_SPARK_SLOTS='1'.*fix: "):
        spark_slots({"TAILFILL_SPARK_SLOTS": "1"})


def test_the_plan_says_how_many_lanes_really_run_at_once():
    assert lanes_at_once(3, {}).startswith("3 lane(s), all at once (pool `tailfill_spark`: 4 slots")
    two_slots = {"TAILFILL_SPARK_SLOTS": "2"}
    assert lanes_at_once(3, two_slots).startswith("3 lanes asked, 1 run at once (pool `tailfill_spark`: 2 slots")


def test_progress_before_the_first_batch_then_rate_eta_and_freshness():
    first = progress([], planned=1_000, started_at=100.0, now=101.0)
    assert (first.offsets_done, first.percent, first.eta_s) == (0, 0.0, None)
    assert first.asstr() == "[running] 0/1,000 offsets (0%) · 0 rows/s · first batch running"
    assert first.asdict()["line"] == first.asstr() and first.asdict()["offsets_planned"] == 1_000

    reports = [report(0, 105.0, 0, 100, quarantined=3), report(1, 110.0, 100, 200)]
    p = progress(reports, planned=1_000, started_at=100.0, now=110.0)
    assert (p.offsets_done, p.rows, p.quarantined, p.batches) == (400, 400, 3, 2)
    assert (p.percent, p.rows_per_s, p.eta_s) == (40.0, 40.0, 15)
    assert p.freshness is None

    last = report(2, 112.0, 200, 250)
    measured = Freshness(0.8, 2.0, 9.0, 100).to_dict()  # what the job writes into a batch report
    fresh = [*reports, BatchReport(**{**last.__dict__, "freshness": measured})]
    tail = progress(fresh, planned=None, started_at=100.0, now=112.0, state="finished")
    assert tail.percent is None and tail.eta_s is None
    assert tail.freshness == measured
    assert "freshness p50 0.8s, p95 2.0s, max 9.0s" in tail.asstr()


def test_a_backfill_lane_shows_no_freshness_even_when_its_batches_measured_one():
    old_history = Freshness(1141.0, 1200.0, 1300.0, 100).to_dict()  # history is old by design: not a figure to read
    reports = [BatchReport(**{**report(0, 105.0, 0, 100).__dict__, "freshness": old_history})]
    lane = progress(reports, planned=1_000, started_at=100.0, now=106.0, tail=False)
    assert lane.freshness is None and "freshness" not in lane.asstr() and lane.asdict()["freshness"] is None
    assert lane.asstr() == "[running] 200/1,000 offsets (20%) · 33 rows/s · ETA 24s · 1 batches"
    assert "freshness p50 1141.0s" in progress(reports, planned=None, started_at=100.0, now=106.0).asstr()


def test_progress_counts_an_earlier_try_as_done_but_not_as_speed():
    p = progress([report(0, 50.0, 0, 100), report(1, 110.0, 100, 150)], planned=400, started_at=100.0, now=110.0)
    assert p.offsets_done == 300 and p.rows_per_s == 10.0 and p.eta_s == 10


BROKER_GONE = "BrokerUnresponsive: the broker at 127.0.0.1:9092 accepted no connection for 15s"


def restart(at: float, cause: str = BROKER_GONE) -> dict:
    """A restart of the job's query as the lane record keeps it."""
    return {"try": 1, "at": at, "label": "slice 1 of 1", "failures": 1, "tolerated": 5, "step": "planning a batch",
            "cause": cause, "wait_seconds": 15.0}


def test_after_a_restart_progress_says_stalled_with_its_cause_not_a_rate_and_an_eta_until_a_batch_commits():
    reports = [report(0, 105.0, 0, 100), report(1, 110.0, 100, 200)]
    moving = progress(reports, planned=1_000, started_at=100.0, now=140.0, restarts=[restart(90.0)])
    assert moving.stalled is None and moving.eta_s is not None  # an earlier try's restart: not this try's stall

    stalled = progress(reports, planned=1_000, started_at=100.0, now=140.0, restarts=[restart(112.0)])
    assert stalled.asstr() == f"[running] 400/1,000 offsets (40%) · 2 batches · stalled: {BROKER_GONE}"
    assert (stalled.stalled, stalled.eta_s, stalled.rows_per_s) == (BROKER_GONE, None, 0.0)
    assert stalled.asdict()["stalled"] == BROKER_GONE and "rows/s" not in stalled.asdict()["line"]
    assert progress([], planned=1_000, started_at=100.0, now=140.0, restarts=[restart(112.0)]).asstr() == \
        f"[running] 0/1,000 offsets (0%) · first batch running · stalled: {BROKER_GONE}"

    again = progress([*reports, report(2, 130.0, 200, 300)], planned=1_000, started_at=100.0, now=140.0,
                     restarts=[restart(112.0)])
    assert again.stalled is None and "rows/s" in again.asstr() and again.eta_s is not None  # moving again
    ended = progress(reports, planned=1_000, started_at=100.0, now=140.0, state="failed", restarts=[restart(112.0)])
    assert ended.stalled is None  # a failed try says its own cause


def test_the_watcher_says_stalled_when_a_restart_is_forced_in(home):
    seen: list = []
    restarts: list[dict] = []
    cfg = load_pipeline(REPO / "pipelines" / "demo.yaml")
    path = report_file(StateStore.of(cfg), "run2", "q0")
    with ProgressWatcher(StateStore.of(cfg), "run2", 400, seen.append, interval=3600,
                         restarts=lambda: restarts) as watcher:
        path.append(report(0, watcher.started_at, 0, 100))
        watcher.poll()
        restarts.append(restart(watcher.started_at + 1))
        watcher.poll(force=True)  # as the operator does when the job says it restarted
    assert [s.stalled for s in seen] == [None, None, BROKER_GONE, None]
    assert seen[2].asstr().endswith(f"1 batches · stalled: {BROKER_GONE}")


def test_watcher_publishes_at_once_then_each_new_batch_then_its_end(home):
    seen: list = []
    cfg = load_pipeline(REPO / "pipelines" / "demo.yaml")
    path = report_file(StateStore.of(cfg), "run1", "q0")
    with ProgressWatcher(StateStore.of(cfg), "run1", 400, seen.append, interval=3600) as watcher:
        assert [s.batches for s in seen] == [0]  # the first line before any batch committed
        path.append(report(0, 1.0, 0, 100))
        watcher.poll()
        watcher.poll()  # nothing new: nothing published
    assert [(s.state, s.batches) for s in seen] == [("running", 0), ("running", 1), ("finished", 1)]
    assert [r.batch_id for r in run_reports(StateStore.of(cfg), "run1")] == [0]


def test_failure_headline_names_cause_and_fix_and_the_java_stack_is_not_the_cause():
    from tailfill.errors import BrokerError, ErrorInfo, QueryFailed
    from tailfill.run.contract import JobResult, Restarted

    out = JobOutput()
    down = ErrorInfo.of(BrokerError("ALL_BROKERS_DOWN: 1/1 brokers are down"))
    restart = Restarted("slices 1-2", 1, 3, "commit of batch 4", down, 1.0)
    exhausted = QueryFailed("[slices 1-2] 4 consecutive failed attempts without committing any offset "
                                  "(tolerated: 3); last cause: BrokerError: ALL_BROKERS_DOWN: 1/1 brokers are down",
                                  down)
    lines = ["Spark Command: /usr/bin/java -cp ...", 'Exception in thread "main" org.apache.spark.SparkException',
             "\tat org.apache.spark.sql.execution.streaming.StreamExecution.run(StreamExecution.scala:300)",
             "[slices 1-2] 100/400 offsets (25%)", restart.asstr(), restart.line(),
             f"error: {exhausted}", JobResult(error=ErrorInfo.of(exhausted)).line()]
    own = [line for line in lines if out.observe(line)]
    assert own == lines[3:]
    assert out.restarts == [restart]
    line = headline("ingest of demo (backfill, slices 1-2)", out, 2)
    assert line.startswith("ingest of demo (backfill, slices 1-2) failed (exit 2): [slices 1-2] 4 consecutive")
    assert "(fix: check that the brokers in source.bootstrap_servers are up" in line
    assert "\n" not in line and "java" not in line.lower()


def test_a_job_killed_while_it_restarted_names_its_last_cause_and_a_crash_names_its_exception():
    from tailfill.errors import ErrorInfo, SourceError
    from tailfill.run.contract import JobResult, Restarted

    out = JobOutput()
    out.observe(Restarted("tail", 1, 3, "planning a batch", ErrorInfo.of(SourceError("t[0] stalled")), 1.0).line())
    assert out.cause == "SourceError: t[0] stalled"
    assert "fix: check that the brokers in source.bootstrap_servers are up" in headline("x", out, -9)

    crashed = JobOutput()
    for line in ("Traceback (most recent call last):", '  File "job.py", line 3', "KeyError: 'offsets'",
                 JobResult(error=ErrorInfo.of(KeyError("offsets"))).line()):
        crashed.observe(line)
    assert crashed.cause == "'offsets'" and crashed.error.error_class == "KeyError"
    assert "fix: read the cause in the job output" in headline("x", crashed, 2)
    silent = JobOutput()
    silent.observe("Traceback (most recent call last):")
    assert silent.cause == "no cause printed"  # a traceback is output, never read for a cause


def test_a_cause_that_names_its_fix_gets_no_second_one():
    from tailfill.errors import ConfigError, ErrorInfo

    assert fix_for(ErrorInfo.of(ConfigError("x.yaml: source.topic: missing (fix: name the topic)"))) == ""


def test_the_fix_comes_from_the_error_class_in_the_jobs_result_document():
    from tailfill.errors import ConfigError, ErrorInfo, ExpiredOffsetsError
    from tailfill.run.contract import JobResult

    out = JobOutput()
    cause = "demo.yaml: source.topic: no such topic"  # names neither the class nor "config"
    for line in (f"error: {cause}", JobResult(error=ErrorInfo.of(ConfigError(cause))).line()):
        out.observe(line)
    assert out.error.error_class == "ConfigError" and out.cause == cause
    assert headline("x", out, 2).endswith(f"(fix: {ConfigError.fix}, then clear this task: it resumes at the "
                                          "first uncommitted offset)")
    # a fix that cannot bring data back does not promise a resume
    from tailfill.offsets import OffsetRange

    assert fix_for(ErrorInfo.of(ExpiredOffsetsError(OffsetRange("t", 0, 0, 5), 5))) == ExpiredOffsetsError.fix


def test_committed_summary_lists_what_was_kept():
    assert committed_summary([]) == "committed before the failure: nothing (no batch of this run finished)"
    text = committed_summary([report(0, 1.0, 0, 100, quarantined=2), report(1, 2.0, 100, 150)])
    assert text == ("committed before the failure: 300 offsets (298 rows, 2 quarantined) in 2 batches, "
                    "kept: t[0] [0, 150), t[1] [0, 150)")


@pytest.mark.parametrize("kind", ["backfill", "incremental", "maintenance"])
def test_a_failed_task_of_every_tailfill_dag_is_recorded(kind, tmp_path, monkeypatch):
    """Every task of each DAG kind carries the failure callback, and calling it records that task's failure."""
    from types import SimpleNamespace

    from tailfill_airflow import dag_factory

    from tailfill.pipeline.load import load_pipeline

    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    monkeypatch.setenv("TAILFILL_PIPELINES", str(REPO / "pipelines"))
    dag = getattr(dag_factory, f"{kind}_dag")(load_pipeline(REPO / "pipelines" / "demo.yaml"))
    assert dag.dag_id == f"demo_{kind}" and dag.tasks
    for t in dag.tasks:
        callbacks = t.on_failure_callback
        callbacks = list(callbacks) if isinstance(callbacks, list | tuple) else [callbacks] if callbacks else []
        assert callbacks, f"{dag.dag_id}.{t.task_id} has no on_failure_callback"
        ti = SimpleNamespace(dag_id=dag.dag_id, run_id="manual__1", task_id=t.task_id, map_index=-1, try_number=2)
        for callback in callbacks:
            callback({"ti": ti, "exception": RuntimeError(f"{t.task_id} broke\nstack")})
    records = read_failures(StateStore.of(load_pipeline(REPO / "pipelines" / "demo.yaml")))  # the demo's state root
    assert sorted((r.task_id, r.error) for r in records) == sorted(
        (t.task_id, f"{t.task_id} broke") for t in dag.tasks)
    assert {(r.dag_id, r.try_number) for r in records} == {(f"demo_{kind}", 2)}


def test_a_failure_record_keeps_the_user_but_not_the_password_of_a_uri(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from tailfill_airflow.callbacks import on_failure

    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    monkeypatch.setenv("TAILFILL_PIPELINES", str(REPO / "pipelines"))
    ti = SimpleNamespace(dag_id="demo_incremental", run_id="manual__1", task_id="preflight", map_index=-1,
                         try_number=1)
    error = "catalog: cannot open the Iceberg catalog at postgresql+psycopg2://u:pw-in-uri@127.0.0.1:9/none: refused"
    on_failure({"ti": ti, "exception": RuntimeError(error)})
    [record] = read_failures(StateStore.of(load_pipeline(REPO / "pipelines" / "demo.yaml")))  # the demo's state root
    assert record.error == error.replace("u:pw-in-uri@", "u:***@")
    stored = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert stored and not [p for p in stored if b"pw-in-uri" in p.read_bytes()]


def test_the_incremental_dag_has_the_deadline_its_pipeline_asks_for_and_no_other_dag_one(tmp_path):
    from datetime import timedelta

    import yaml
    from tailfill_airflow.dag_factory import backfill_dag, incremental_dag, maintenance_dag

    from tailfill.pipeline.load import load_pipeline

    demo = Path(__file__).resolve().parents[2] / "pipelines" / "demo.yaml"
    assert not incremental_dag(load_pipeline(demo)).deadline  # the demo sets none (Airflow 3.3.2's dags test)
    data = yaml.safe_load(demo.read_text())
    data["tail"]["run_deadline_seconds"] = 900
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = load_pipeline(path)
    [deadline] = incremental_dag(cfg).deadline
    assert deadline.interval == timedelta(minutes=15)
    assert deadline.callback.path == "tailfill_airflow.callbacks.deadline_missed"
    assert deadline.callback.kwargs == {"interval_seconds": 900}
    assert not backfill_dag(cfg).deadline and not maintenance_dag(cfg).deadline


def test_a_missed_deadline_is_recorded_with_its_run_and_the_fix(tmp_path, monkeypatch):
    import asyncio

    from tailfill_airflow.callbacks import deadline_missed

    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    monkeypatch.setenv("TAILFILL_PIPELINES", str(REPO / "pipelines"))
    context = {"dag_run": {"dag_id": "demo_incremental", "dag_run_id": "scheduled__2026-11-23T10:00"},
               "deadline": {"id": "d1", "deadline_time": "2026-11-23T10:10:00+00:00"}}
    asyncio.run(deadline_missed(interval_seconds=600.0, context=context))
    [record] = read_failures(StateStore.of(load_pipeline(REPO / "pipelines" / "demo.yaml")))
    assert (record.dag_id, record.run_id) == ("demo_incremental", "scheduled__2026-11-23T10:00")
    assert record.error.startswith("deadline missed: the run was not finished 600s after it was queued")
    assert "fix:" in record.error


def test_scheduled_dags_come_up_paused_so_nothing_runs_before_the_user_chooses():
    """The first incremental run records the cutover (the tail's start): not before the user unpauses it."""
    from tailfill_airflow.dag_factory import incremental_dag, maintenance_dag

    cfg = load_pipeline(REPO / "pipelines" / "demo.yaml")
    assert incremental_dag(cfg).is_paused_upon_creation is True
    assert maintenance_dag(cfg).is_paused_upon_creation is True


@pytest.mark.parametrize("kind", ["backfill", "incremental", "maintenance"])
def test_a_retried_failure_is_recorded_and_alerted_too(kind, tmp_path, monkeypatch):
    """An outage that Airflow's retries ride out is still alerted: the retry callback records it."""
    from types import SimpleNamespace

    from tailfill_airflow import dag_factory

    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    monkeypatch.setenv("TAILFILL_PIPELINES", str(REPO / "pipelines"))
    cfg = load_pipeline(REPO / "pipelines" / "demo.yaml")
    dag = getattr(dag_factory, f"{kind}_dag")(cfg)
    for t in dag.tasks:
        assert t.on_retry_callback, f"{dag.dag_id}.{t.task_id} has no on_retry_callback"
    task = dag.tasks[0]
    ti = SimpleNamespace(dag_id=dag.dag_id, run_id="manual__1", task_id=task.task_id, map_index=-1, try_number=1)
    callbacks = task.on_retry_callback if isinstance(task.on_retry_callback, list) else [task.on_retry_callback]
    for callback in callbacks:
        callback({"ti": ti, "exception": RuntimeError("broker gone for a while")})
    [record] = read_failures(StateStore.of(cfg))
    assert (record.task_id, record.will_retry, record.error) == (task.task_id, True, "broker gone for a while")


def test_worker_side_tasks_fail_with_one_line_and_only_retry_what_can_succeed():
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
    from tailfill_airflow.causes import causes_first

    from tailfill.errors import BrokerError, SourceError

    # An unreachable broker: no point in retrying now.
    with pytest.raises(AirflowFailException) as final, causes_first("preflight of demo (tail)"):
        raise BrokerError("cannot reach Kafka at 127.0.0.1:9 (fix: start the broker)\ntraceback text")
    assert str(final.value) == ("preflight of demo (tail) failed: cannot reach Kafka at 127.0.0.1:9 "
                                "(fix: start the broker)")
    with pytest.raises(AirflowException) as retried, causes_first("planning the tail of demo"):
        raise SourceError("reading t[0] stalled")
    assert not isinstance(retried.value, AirflowFailException)
