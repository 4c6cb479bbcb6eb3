"""A run without a lane says what happened: the task that failed and why, nothing to do, the upkeep's result."""

from __future__ import annotations

import sys
from pathlib import Path

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


def test_the_freshness_objective_is_missed_by_any_batch_above_it():
    from tailfill_airflow.objective import check_objective

    from tailfill.state.records import BatchReport

    def batch(p95: float | None) -> BatchReport:
        fresh = {"p50": 1.0, "p95": p95, "max": p95, "records": 10} if p95 is not None else None
        return BatchReport(batch_id=0, at=0.0, seconds=1.0, offsets=10, records=10, rows=10, quarantined=0,
                           freshness=fresh)

    met = check_objective(60, [batch(12.0), batch(None), batch(59.9)])
    assert met.met and met.asdict() == {"objective_seconds": 60, "batches": 2, "missed": 0, "worst_p95": 59.9,
                                        "met": True}
    missed = check_objective(60, [batch(12.0), batch(381.0)])
    assert not missed.met and missed.missed == 1
    assert missed.asstr().startswith("freshness objective p95 ≤ 60s MISSED by 1 of 2 batch(es) (worst batch p95 "
                                     "381.0s) (fix: run the incremental DAG more often")
    assert check_objective(60, []).asstr() == "freshness objective p95 ≤ 60s: no batch measured in this run"


def test_a_missed_objective_fails_the_report_when_the_pipeline_says_fail(home, tmp_path, monkeypatch):
    """``tail.on_missed_objective: fail``: the report task fails naming the objective, the batches and the fix."""
    import pytest
    from airflow.sdk.exceptions import AirflowFailException

    from tailfill.pipeline.load import load_pipeline
    from tailfill.state.records import BatchReport
    from tailfill.state.store import StateStore, report_file

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    from tailfill_airflow.dag_factory import objective_of_run

    cfg = load_pipeline(REPO / "pipelines" / "demo.yaml")
    cfg = cfg.model_copy(update={"tail": cfg.tail.model_copy(update={"on_missed_objective": "fail"})})
    late = {"p50": 400.0, "p95": 950.0, "max": 990.0, "records": 10}
    report_file(StateStore.of(cfg), "tail-1", "q0").append(
        BatchReport(batch_id=0, at=1.0, seconds=1.0, offsets=10, records=10, rows=10, quarantined=0, freshness=late))
    with pytest.raises(AirflowFailException, match=r"^freshness objective p95 ≤ 900s MISSED by 1 of 1 batch\(es\) "
                                                   r"\(worst batch p95 950\.0s\) \(fix: .*tail.on_missed_objective: "
                                                   r"fail$"):
        objective_of_run(cfg, "tail-1")


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
