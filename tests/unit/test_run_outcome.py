"""A run without a lane says what happened: the task that failed and why, nothing to do, the upkeep's result."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
from tailfill_airflow.naming import BACKFILL, INCREMENTAL, MAINTENANCE  # noqa: E402
from tailfill_airflow.outcome import TaskState, run_outcome  # noqa: E402
from tailfill_airflow.views import run_links  # noqa: E402

from tailfill.state.records import FailureRecord  # noqa: E402


def tasks(**states: str) -> list[TaskState]:
    return [TaskState(task_id, -1, state, 1) for task_id, state in states.items()]


def failure(task_id: str, error: str, will_retry: bool = False, try_number: int = 1) -> FailureRecord:
    return FailureRecord(at=1.0, dag_id="d_backfill", run_id="r", task_id=task_id, map_index=-1,
                         try_number=try_number, error=error, will_retry=will_retry)


def no_value(task_id: str):
    raise AssertionError(f"{task_id}'s value was not needed")


def test_a_failed_preflight_names_its_cause_and_fix():
    cause = "preflight of d (backfill) failed: topic 't' not found on 127.0.0.1:9 (fix: create the topic)"
    out = run_outcome(BACKFILL, tasks(preflight="failed", plan="upstream_failed"), [failure("preflight", cause)],
                      no_value)
    assert (out.cls, out.task_id, out.running) == ("bad", "preflight", False)
    assert out.text == f"FAILED at preflight (try 1): {cause}"


def test_a_failed_plan_without_a_record_points_at_its_log():
    out = run_outcome(BACKFILL, tasks(preflight="success", plan="failed"), [], no_value)
    assert out.text.startswith("FAILED at plan (try 1): no cause was recorded") and out.task_id == "plan"


def test_a_try_that_airflow_retries_shows_its_cause_and_keeps_refreshing():
    out = run_outcome(INCREMENTAL, tasks(preflight="up_for_retry"),
                      [failure("preflight", "catalog down", will_retry=True)], no_value)
    assert out.running and out.cls == "bad" and "Airflow will try it again: catalog down" in out.text


def test_nothing_to_backfill_and_nothing_new_to_tail_say_so():
    out = run_outcome(BACKFILL, tasks(preflight="success", plan="success"), [], lambda task_id: [])
    assert out.cls == "good" and out.text.startswith("Nothing to do: every offset of the requested range")
    out = run_outcome(INCREMENTAL, tasks(preflight="success", tune="success"), [], lambda task_id: None)
    assert out.cls == "good" and out.text.startswith("Nothing new since the committed position")


def test_a_scheduled_run_that_handed_over_names_the_run_doing_the_work_not_nothing_new():
    line = "Handed over to run manual__1: that run, triggered by hand, ingests the waiting offsets"
    out = run_outcome(INCREMENTAL, tasks(preflight="success", tune="success"), [], lambda task_id: None,
                      handed_over=line)
    assert (out.cls, out.text, out.task_id) == ("good", line, "tune")


def test_a_run_still_planning_refreshes():
    out = run_outcome(BACKFILL, tasks(preflight="success", plan="running"), [], no_value)
    assert out.running and out.cls == "muted" and out.text == "plan is running: no lane has started yet"
    out = run_outcome(BACKFILL, [], [], no_value)  # not even scheduled yet
    assert out.running and out.text.startswith("preflight is waiting")


def test_maintenance_shows_what_it_compacted_and_expired():
    summary = ("maintenance of d (target file 1 B) in 1.0s\n  ns.t: compacted 4 files into 1; expired 2 snapshots")
    out = run_outcome(MAINTENANCE, tasks(maintain="success"), [],
                      lambda task_id: {"tables": [{"table": "ns.t"}], "seconds": 1.0, "summary": summary})
    assert out.text == "Maintenance done in 1.0s"
    assert out.details == ["maintenance of d (target file 1 B) in 1.0s", "ns.t: compacted 4 files into 1; "
                           "expired 2 snapshots"]
    out = run_outcome(MAINTENANCE, tasks(maintain="failed"), [failure("maintain", "catalog: refused")], no_value)
    assert out.text == "FAILED at maintain (try 1): catalog: refused"


def test_links_name_only_lanes_that_started():
    links = run_links("d_backfill", "r", [])
    assert "laneNone" not in links and "report/" not in links and "output/" not in links
    assert "pipeline/d_backfill" in links and "quarantine/d_backfill" in links
    links = run_links("d_backfill", "r", [(0, "slice 1 of 2"), (1, "slice 2 of 2")])
    assert "report/d_backfill/r/0" in links and "output/d_backfill/r/1" in links


def test_a_replay_links_its_completeness_report_like_a_lane():
    links = run_links("d_backfill", "r", [], replays=[None])
    assert 'replay of committed offsets: <a href="../../report/d_backfill/r/replay"' in links
    routed = run_links("d_backfill", "r", [], replays=["customers", "orders"])  # a table per topic: one per table
    assert 'replay of committed offsets of table orders: <a href="../../report/d_backfill/r/replay?table=orders"' \
        in routed and "r/replay?table=customers" in routed


def test_a_stalled_lane_shows_its_cause_and_no_rate_or_eta():
    from tailfill_airflow.views import _lane_rows

    cause = "BrokerUnresponsive: the broker at 127.0.0.1:9092 accepted no connection for 15s"
    restart = {"try": 1, "at": 60.0, "label": "slice 1", "failures": 1, "tolerated": 5, "step": "planning a batch",
               "cause": cause, "wait_seconds": 15.0}
    lane = {"label": "slice 1", "state": "running", "try_number": 1, "percent": 40.0, "offsets_done": 40,
            "offsets_planned": 100, "rows_per_s": 0.0, "eta_s": None, "batches": 2, "restarts": [restart],
            "stalled": cause}
    rows = _lane_rows([lane], freshness=False)
    assert f'<td colspan=8 class="l bad stalled">stalled: {cause}</td>' in rows
    assert "<td>40/100</td><td>-</td><td>-</td><td>2</td>" in rows  # no rate, no ETA
    assert "last restart" not in rows  # the stall names it


def test_a_lane_counts_its_restarts_and_names_the_last_cause():
    from tailfill_airflow.causes import restart_record
    from tailfill_airflow.views import _lane_rows

    from tailfill.errors import ErrorInfo
    from tailfill.run.contract import Restarted

    error = ErrorInfo("PythonException", "Python worker failed to connect back", retryable=True, fix="retry")
    event = Restarted(label="slice 1", failures=1, tolerated=3, step="prepare", error=error, wait_seconds=2.0)
    restarts = [restart_record(event, 1, 60.0), restart_record(event, 2, 120.0)]
    assert restarts[0] | {"cause": ""} == {"try": 1, "at": 60.0, "label": "slice 1", "failures": 1, "tolerated": 3,
                                          "step": "prepare", "cause": "", "wait_seconds": 2.0}
    assert "Python worker failed to connect back" in restarts[0]["cause"]
    lane = {"label": "slice 1", "state": "finished", "try_number": 2, "percent": 100.0, "offsets_done": 10,
            "offsets_planned": 10, "rows_per_s": 5.0, "eta_s": None, "batches": 1, "restarts": restarts}
    rows = _lane_rows([lane], freshness=False)
    assert "finished, try 2, 2 restarts" in rows
    assert "last restart (try 2, 00:02:00 UTC, at prepare): " in rows and "failed to connect back" in rows


def batch(p95: float | None, at: float = 0.0, seconds: float = 1.0, batch_id: int = 0):
    """A tail batch whose records' p95 produce-to-commit latency was ``p95`` (None: not measured)."""
    from tailfill.state.records import BatchReport

    fresh = {"p50": 1.0, "p95": p95, "max": p95, "records": 10} if p95 is not None else None
    return BatchReport(batch_id=batch_id, at=at, seconds=seconds, offsets=10, records=10, rows=10, quarantined=0,
                       freshness=fresh)


def test_the_freshness_objective_is_missed_by_any_batch_above_it():
    from tailfill_airflow.objective import check_objective

    met = check_objective(60, [batch(12.0), batch(None), batch(59.9)])
    assert met.met and met.asdict() == {"objective_seconds": 60, "batches": 2, "missed": 0, "worst_p95": 59.9,
                                        "cause": None, "fix": None, "met": True}
    missed = check_objective(60, [batch(381.0)])
    assert not missed.met and missed.missed == 1
    assert missed.asstr() == ("freshness objective p95 ≤ 60s MISSED by 1 of 1 batch(es) (worst batch p95 381.0s): "
                              "schedule: the run's first batch missed it already (p95 381.0s): its records waited "
                              "for the run to start (fix: run the incremental DAG more often than every 60s, or set "
                              "tail.freshness_seconds to what its schedule allows)")
    assert check_objective(60, []).asstr() == "freshness objective p95 ≤ 60s: no batch measured in this run"


def test_a_missed_objective_names_the_cause_the_run_measured():
    """Restarts or retries: an outage (with the last restart's cause); a batch slower than the objective; later
    batches late behind an early one in time: a backlog; else the schedule."""
    from tailfill_airflow.objective import check_objective

    late = [batch(12.0, at=1), batch(381.0, at=2, batch_id=1)]
    restart = {"try": 1, "at": 5.0, "cause": "BrokerUnresponsive: no broker of 127.0.0.1:9 answered in 30s"}
    outage = check_objective(60, late, [restart])
    assert outage.cause == ("outage: the job restarted its query 1 time(s) in this run (last cause: "
                            "BrokerUnresponsive: no broker of 127.0.0.1:9 answered in 30s)")
    assert "the part that failed" in outage.fix
    assert check_objective(60, late, tries=3).cause == "outage: the task ran 3 tries in this run"
    assert check_objective(60, late).cause.startswith("backlog: the run's first 1 batch(es) met it, then records "
                                                      "waited behind them (20 offsets in 2 batches)")
    slow = check_objective(60, [batch(90.0, seconds=75.0, batch_id=4)])
    assert slow.cause == "slow batch: batch 4 took 75.0s itself, longer than the objective"
    assert "tail.max_offsets_per_batch" in slow.fix
    assert check_objective(60, [batch(90.0), batch(95.0, at=1)]).cause.startswith("schedule: ")


def demo_with_late_batches(home, tmp_path, monkeypatch, on_missed: str | None, p95: float):
    """The demo pipeline (``tail.on_missed_objective`` as given, None: its default) with one tail batch of ``p95``
    recorded, and Airflow's home and the alerting hook in the test's directory."""
    import yaml

    from tailfill.pipeline.load import load_pipeline
    from tailfill.state.store import StateStore, report_file

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setenv("TAILFILL_PIPELINES", str(tmp_path / "pipelines"))
    monkeypatch.setenv("TAILFILL_ON_FAILURE", "alert_hook:record")
    monkeypatch.setenv("TAILFILL_TEST_ALERTS", str(tmp_path / "alerts.jsonl"))
    monkeypatch.syspath_prepend(str(REPO / "tests"))
    data = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())
    data["tail"].pop("on_missed_objective", None)
    if on_missed:
        data["tail"]["on_missed_objective"] = on_missed
    (tmp_path / "pipelines").mkdir()
    path = tmp_path / "pipelines" / "demo.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = load_pipeline(path)
    report_file(StateStore.of(cfg), "tail-1", "q0").append(batch(p95, at=1.0))
    return cfg


def run_objective_task(cfg, monkeypatch):
    """The incremental DAG's ``report`` objective, then its ``objective`` task as Airflow runs it (the task's
    callable in its context; on failure, the task's failure callback): the task's error (or None), what it returned
    and the XComs it pushed."""
    from types import SimpleNamespace

    from airflow.sdk.execution_time.context import set_current_context
    from tailfill_airflow.dag_factory import incremental_dag, objective_of_run

    dag = incremental_dag(cfg)
    reported = {"objective": objective_of_run(cfg, "tail-1")}
    task = dag.get_task("objective")
    ti = SimpleNamespace(dag_id=dag.dag_id, run_id="scheduled__1", task_id="objective", map_index=-1, try_number=1,
                         xcoms={})
    ti.xcom_push = lambda key, value: ti.xcoms.update({key: value})
    with set_current_context({"ti": ti}):
        try:
            return None, task.python_callable(reported), ti.xcoms
        except Exception as exc:  # what Airflow does with a failed task: its state, then its failure callback
            for callback in task.on_failure_callback if isinstance(task.on_failure_callback, list) \
                    else [task.on_failure_callback]:
                callback({"ti": ti, "exception": exc})
            return exc, None, ti.xcoms


def test_a_missed_objective_fails_the_objective_task_by_default_naming_its_cause_and_alerting(home, tmp_path,
                                                                                              monkeypatch):
    """The default (``tail.on_missed_objective: fail``): the report lands, then ``objective`` fails at once in one line
    with the cause and fix; the failure is recorded for the run's tab and sent to the alerting hook."""
    from airflow.sdk.exceptions import AirflowFailException
    from alert_hook import alerts

    from tailfill.state.store import StateStore, read_failures

    cfg = demo_with_late_batches(home, tmp_path, monkeypatch, None, p95=950.0)
    assert cfg.tail.on_missed_objective == "fail"
    error, _, xcoms = run_objective_task(cfg, monkeypatch)
    line = ("freshness objective p95 ≤ 900s MISSED by 1 of 1 batch(es) (worst batch p95 950.0s): schedule: the run's "
            "first batch missed it already (p95 950.0s): its records waited for the run to start (fix: run the "
            "incremental DAG more often than every 900s, or set tail.freshness_seconds to what its schedule allows)")
    assert isinstance(error, AirflowFailException) and str(error) == line
    [record] = read_failures(StateStore.of(cfg))
    assert (record.task_id, record.error, record.warning) == ("objective", line, False)
    [alert] = alerts(tmp_path / "alerts.jsonl")
    assert (alert["task_id"], alert["error"]) == ("objective", line)
    failure = xcoms["failure"]  # for automation through the REST API, and the task's note
    assert (failure["what"], failure["error_class"], failure["cause"], failure["retryable"]) == (
        "the freshness objective of demo", "ObjectiveMissed", line, False)


def test_a_missed_objective_only_warns_when_the_pipeline_says_warn(home, tmp_path, monkeypatch):
    from alert_hook import alerts

    cfg = demo_with_late_batches(home, tmp_path, monkeypatch, "warn", p95=950.0)
    error, result, _ = run_objective_task(cfg, monkeypatch)
    assert error is None and result["met"] is False and "MISSED" in result["missed"][0]
    [alert] = alerts(tmp_path / "alerts.jsonl")
    assert alert["task_id"] == "objective" and alert["warning"] and "schedule: " in alert["error"]


def test_a_met_objective_succeeds_and_alerts_nobody(home, tmp_path, monkeypatch):
    from alert_hook import alerts

    cfg = demo_with_late_batches(home, tmp_path, monkeypatch, None, p95=12.0)
    error, result, _ = run_objective_task(cfg, monkeypatch)
    assert error is None and result == {"met": True, "missed": []}
    assert alerts(tmp_path / "alerts.jsonl") == []


def test_a_failed_task_shows_the_fix_of_its_failure_xcom_unless_its_cause_names_one():
    cause = "preflight of d (backfill) failed: cannot reach Kafka at 127.0.0.1:9"
    xcom = {"what": "preflight of d (backfill)", "cause": cause, "fix": "start the broker"}
    out = run_outcome(BACKFILL, tasks(preflight="failed"), [failure("preflight", cause)], no_value,
                      lambda task_id: xcom if task_id == "preflight" else None)
    assert out.details == ["fix: start the broker"]
    named = f"{cause} (fix: start the broker)"
    out = run_outcome(BACKFILL, tasks(preflight="failed"), [failure("preflight", named)], no_value, lambda _: xcom)
    assert out.details == [] and out.text.endswith("(fix: start the broker)")
    out = run_outcome(INCREMENTAL, tasks(preflight="up_for_retry"), [failure("preflight", cause, will_retry=True)],
                      no_value, lambda _: xcom)
    assert out.running and out.details == ["fix: start the broker"]


def test_a_failure_note_says_what_failed_why_and_the_fix():
    from tailfill_airflow.failure_notes import note_text

    failure = {"what": "preflight of gone (backfill)", "error_class": "BrokerUnresponsive",
               "cause": "cannot reach Kafka at 127.0.0.1:9", "fix": "start the broker", "retryable": False}
    assert note_text(failure) == ("Tailfill: preflight of gone (backfill) failed. BrokerUnresponsive: cannot reach "
                                  "Kafka at 127.0.0.1:9\nfix: start the broker")
    assert note_text({"what": "tail of x"}) == "Tailfill: tail of x failed. error: no cause recorded"


def test_a_backfill_that_only_replayed_shows_its_summary_verdict_not_nothing_to_do():
    headline = "REPLAYED 10,000 offsets: their rows were re-read and replaced; nothing else of the range was left"
    values = {"plan": [], "summary": {"verdict": "REPLAYED", "headline": headline, "replayed": 10_000}}
    out = run_outcome(BACKFILL, tasks(preflight="success", plan="success", summary="success"), [], values.get)
    assert (out.cls, out.text, out.task_id, out.running) == ("good", headline, "summary", False)
    waiting = run_outcome(BACKFILL, tasks(preflight="success", plan="success", summary="queued"), [],
                          {"plan": []}.get)
    assert waiting.running and "Nothing to do" not in waiting.text


def test_a_table_that_only_replayed_is_replayed_and_one_whose_replay_is_incomplete_fails_the_run():
    from tailfill_airflow.routed_plans import TablesIncomplete, tables_verdict

    proof = {"run_id": "replay-1", "verdict": "COMPLETE", "offsets": 600, "rows": 600, "quarantined": 0,
             "ranges": {"r.orders": {"0": [[0, 300]], "1": [[0, 300]]}}, "report": "http://127.0.0.1/report"}
    out = tables_verdict("backfill of shop", [], {}, {"orders": proof})
    assert out["tables"]["orders"] | {"replay": None} == {"verdict": "REPLAYED", "offsets": 0, "runs": 0,
                                                          "problems": [], "replayed": 600, "replay": None}
    assert (out["replayed"], out["offsets"], out["tables"]["orders"]["replay"]) == (600, 0, proof)
    broken = proof | {"verdict": "INCOMPLETE", "problems": ["r.orders[0] 5..6 missing"]}
    with pytest.raises(TablesIncomplete, match=r"0 of 1 table\(s\) complete; not complete: orders"):
        tables_verdict("backfill of shop", [], {}, {"orders": broken})
