"""What a run did outside its lanes, for its Tailfill tab: the task that failed and why, "nothing to do",
what the upkeep did — read from Airflow's own records of the run and the failures the tasks recorded.

A run without a lane (one that failed at preflight or plan, a backfill or tail with nothing to do, every
maintenance run) would otherwise show nothing; :func:`run_outcome` says what happened from the states of
the run's tasks, their return values and the failure records (``tailfill_airflow.callbacks``). It is pure:
:func:`read_run_tasks` and :func:`read_xcom` read Airflow's metadata database (the plugin runs in the API
server, which holds it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tailfill.run.verdict import backfill_verdict
from tailfill.state.records import FailureRecord
from tailfill_airflow.naming import BACKFILL, INCREMENTAL, MAINTENANCE

# Each kind's tasks before (or instead of) its lanes, in the order they run.
LEAD_TASKS = {BACKFILL: ("preflight", "plan"), INCREMENTAL: ("preflight", "tune"), MAINTENANCE: ("maintain",)}
WAITING = {None, "none", "scheduled", "queued", "deferred", "up_for_reschedule", "restarting"}


@dataclass(frozen=True)
class TaskState:
    """One task instance of a run as Airflow holds it."""

    task_id: str
    map_index: int
    state: str | None
    try_number: int


@dataclass(frozen=True)
class Outcome:
    """What the tab says of a run: a css class (``bad``, ``good``, ``muted``), a headline, detail lines, and
    whether the run is still going (the page refreshes)."""

    cls: str
    text: str
    details: list[str] = field(default_factory=list)
    running: bool = False
    task_id: str | None = None  # the task the headline is about (its log is linked)


def latest_failure(failures: list[FailureRecord], task_id: str, map_index: int = -1) -> FailureRecord | None:
    """The last failure recorded for one task of a run (``failures``: the run's, oldest first)."""
    mine = [f for f in failures if not f.warning and f.task_id == task_id
            and (f.map_index if f.map_index is not None else -1) == map_index]
    return mine[-1] if mine else None


def run_outcome(kind: str, tasks: list[TaskState], failures: list[FailureRecord],
                value_of: Callable[[str], Any], failure_of: Callable[[str], Any] = lambda task_id: None,
                handed_over: str | None = None) -> Outcome:
    """The outcome of a run that has no lane to show (``failures``: its recorded failures, oldest first;
    ``value_of(task_id)``: what that task returned; ``failure_of(task_id)``: its ``failure`` XCom, whose fix is
    shown when the cause does not name one; ``handed_over``: the headline of a scheduled run that left the work to
    a run waiting behind it)."""
    by_id = {t.task_id: t for t in tasks if t.map_index == -1}
    for task_id in LEAD_TASKS[kind]:
        task = by_id.get(task_id)
        state = task.state if task else None
        failure = latest_failure(failures, task_id)
        if state == "failed":
            cause = failure.error if failure else "no cause was recorded: the task's log has it"
            return Outcome("bad", f"FAILED at {task_id} (try {task.try_number}): {cause}",
                           fix_lines(cause, failure_of(task_id)), task_id=task_id)
        if state == "up_for_retry":
            cause = failure.error if failure else "see the task's log"
            return Outcome("bad", f"{task_id} failed (try {task.try_number}), Airflow will try it again: {cause}",
                           fix_lines(cause, failure_of(task_id)), running=True, task_id=task_id)
        if state in ("upstream_failed", "skipped", "removed"):
            return Outcome("muted", f"{task_id} did not run ({state})", task_id=task_id)
        if state in WAITING or state == "running":
            return Outcome("muted", f"{task_id} is {state or 'waiting'}: no lane has started yet", running=True,
                           task_id=task_id)
    last = LEAD_TASKS[kind][-1]
    value = value_of(last)
    if kind == BACKFILL and not value:
        return backfill_without_lanes(by_id.get("summary"), value_of("summary"))
    if kind == INCREMENTAL and not value and handed_over:
        return Outcome("good", handed_over, task_id=last)
    if kind == INCREMENTAL and not value:
        return Outcome("good", "Nothing new since the committed position: no Spark job was started, validation "
                               "skipped", task_id=last)
    if kind == MAINTENANCE:
        return maintenance_outcome(value)
    return Outcome("muted", f"{last} finished; no lane has started yet", running=True, task_id=last)


def backfill_without_lanes(summary: TaskState | None, value: Any) -> Outcome:
    """A backfill that planned no lane: the verdict its ``summary`` task gave (``REPLAYED n offsets`` when it
    replayed committed offsets, else nothing to do), or that the summary is still coming."""
    if isinstance(value, dict) and value.get("headline"):
        return Outcome("good", value["headline"], task_id="summary")
    if summary is not None and (summary.state in WAITING or summary.state == "running"):
        return Outcome("muted", "plan finished without a lane; the summary gives the verdict", running=True,
                       task_id="plan")
    return Outcome("good", backfill_verdict(0, 0).headline, task_id="plan")


def fix_lines(cause: str, failure: Any) -> list[str]:
    """``["fix: …"]`` from a failed task's ``failure`` XCom, unless ``cause`` names its fix already."""
    fix = failure.get("fix") if isinstance(failure, dict) else None
    return [f"fix: {fix}"] if fix and "(fix:" not in cause else []


def maintenance_outcome(value: Any) -> Outcome:
    """A finished upkeep run: what it compacted, expired and removed per table (its XCom)."""
    if not isinstance(value, dict):
        return Outcome("muted", "maintain finished without a result", task_id="maintain")
    lines = str(value.get("summary") or "").splitlines()
    if not value.get("tables"):
        return Outcome("good", "Maintenance done: the tables were never made, nothing to keep up", lines[:1],
                       task_id="maintain")
    return Outcome("good", f"Maintenance done in {value.get('seconds', 0):.1f}s",
                   [line.strip() for line in lines], task_id="maintain")


# --- Airflow's records of a run (the API server's database) ------------------------------------------


def read_run_tasks(dag_id: str, run_id: str) -> list[TaskState]:
    """Every task instance of a run: id, map index, state and try."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state, TaskInstance.try_number).where(
        TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
    with create_session() as session:
        return [TaskState(task_id, map_index, getattr(state, "value", state), try_number or 0)
                for task_id, map_index, state, try_number in session.execute(query)]


def read_xcom(dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
    """A task's XCom (what it returned, by default); None when it pushed none."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    query = XComModel.get_many(run_id=run_id, key=key, task_ids=task_id, dag_ids=dag_id, map_indexes=map_index)
    with create_session() as session:
        row = session.scalars(query.limit(1)).first()
        return XComModel.deserialize_value(row) if row is not None else None


def read_run_state(dag_id: str, run_id: str) -> str | None:
    """The DAG run's state (``running``, ``success``, ``failed``, …); None for a run Airflow does not know."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        state = session.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    return getattr(state, "value", state)
