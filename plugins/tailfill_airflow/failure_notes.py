"""A failed task's cause and fix as its task note, for people who look at the grid and for the REST API.

A task cannot set its own note in Airflow 3 (the Task SDK has no call for it, the execution API no route). The
scheduler can: when a Tailfill DAG run fails, this listener (registered by the plugin) reads each failed task's
``failure`` XCom (:func:`tailfill_airflow.causes.push_failure`) and writes it as that task's note. It does so in a
thread of its own, with a session of its own, once the scheduler committed the run's state: the scheduler's
session must not be committed by anyone else (Airflow guards its HA locks), and nothing here may hold up or
spoil the scheduler's loop. A note a person wrote is kept.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from airflow.listeners import hookimpl

from tailfill_airflow.causes import FAILURE_KEY
from tailfill_airflow.naming import split_dag_id

log = logging.getLogger(__name__)


def note_text(failure: dict[str, Any]) -> str:
    """The note for one ``failure`` XCom: what failed and why, then the fix."""
    cause = f"{failure.get('error_class') or 'error'}: {failure.get('cause') or 'no cause recorded'}"
    lines = [f"Tailfill: {failure.get('what') or 'the task'} failed. {cause}"]
    if failure.get("fix"):
        lines.append(f"fix: {failure['fix']}")
    return "\n".join(lines)


@hookimpl
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    """Write the failed tasks' causes as their notes, soon after one of Tailfill's DAG runs failed."""
    try:
        split_dag_id(dag_run.dag_id)
    except ValueError:
        return  # not a Tailfill DAG
    threading.Thread(target=write_notes_when_failed, args=(dag_run.dag_id, dag_run.run_id),
                     name=f"tailfill-notes-{dag_run.run_id}", daemon=True).start()


def write_notes_when_failed(dag_id: str, run_id: str, timeout_s: float = 60) -> int:
    """Wait (up to ``timeout_s``) until the run's failed state is committed, then :func:`write_notes`."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    deadline = time.monotonic() + timeout_s
    try:
        while True:
            with create_session() as session:
                state = session.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
                if getattr(state, "value", state) == "failed":
                    return write_notes(session, dag_id, run_id)
            if time.monotonic() > deadline:
                log.warning("no failure notes for %s %s: its failed state was not committed within %.0fs", dag_id,
                            run_id, timeout_s)
                return 0
            time.sleep(0.5)
    except Exception:  # a note is a courtesy: never fail anything for it, but say so
        log.exception("could not write the failure notes of %s %s", dag_id, run_id)
        return 0


def write_notes(session: Any, dag_id: str, run_id: str) -> int:
    """Set the note of every failed task of the run that pushed a ``failure`` XCom and has no note; how many."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    written = 0
    failed = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id,
                                                        TaskInstance.state == "failed"))
    for ti in failed:
        if ti.note:
            continue
        query = XComModel.get_many(run_id=run_id, key=FAILURE_KEY, task_ids=ti.task_id, dag_ids=dag_id,
                                   map_indexes=ti.map_index)
        row = session.scalars(query.limit(1)).first()
        failure = XComModel.deserialize_value(row) if row is not None else None
        if isinstance(failure, dict):
            ti.note = note_text(failure)
            written += 1
    return written
