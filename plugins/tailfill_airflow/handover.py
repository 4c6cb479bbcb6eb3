"""A scheduled incremental run leaves the work to a run triggered by hand that waits behind it.

Triggering a paused incremental DAG with *unpause* makes two runs at once: the one asked for, and the scheduled run
that unpausing creates, which Airflow starts first (one run at a time, the earlier run first). Without a hand-over
the scheduled run would take every waiting offset and the run the person asked for would say "Nothing new". So
a scheduled run whose ``tune`` finds a run of its DAG queued behind it (no other scheduled run can be: the DAG runs
one at a time and makes no scheduled run while one is active) ingests nothing and says so
(:func:`manual_run_waiting`, the ``handed_over`` XCom); the run's tab names the run that does the work
(:func:`handover_headline`, on the API server, which holds Airflow's records).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

HANDED_OVER_KEY = "handed_over"  # the tune task's XCom of a scheduled run that left the work to a waiting one
HANDED_OVER_LINE = ("a run triggered by hand waits behind this scheduled run: it ingests the waiting offsets, this "
                    "run leaves them to it (no Spark job, validation skipped)")


def manual_run_waiting(dag_run: Any) -> bool:
    """Whether ``dag_run`` (a running task's) is a scheduled run with a run of its DAG queued behind it."""
    run_type = getattr(dag_run, "run_type", None)
    if getattr(run_type, "value", run_type) != "scheduled":
        return False
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    return RuntimeTaskInstance.get_dr_count(dag_id=dag_run.dag_id, states=["queued"]) > 0


def hand_over(ti: Any) -> None:
    """Record in ``ti``'s XCom that its run left the work to the run waiting behind it, and when."""
    ti.xcom_push(key=HANDED_OVER_KEY, value={"at": time.time(), "line": HANDED_OVER_LINE})


def handover_headline(handed: Any, dag_id: str) -> str | None:
    """The tab's headline of a run that handed over (``handed``: its ``handed_over`` XCom, None for any other run),
    naming the run that does the work when Airflow's records show it."""
    if not isinstance(handed, dict):
        return None
    target = read_waiting_run(dag_id, float(handed.get("at") or 0))
    who = f"run {target}" if target else "the run triggered by hand that was waiting behind it"
    return (f"Handed over to {who}: that run, triggered by hand, ingests the waiting offsets and has the verdict; "
            "this scheduled run started no Spark job")


def read_waiting_run(dag_id: str, at: float) -> str | None:
    """The first run of ``dag_id`` triggered by hand that was queued at ``at`` and not yet started."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import or_, select

    moment = datetime.fromtimestamp(at, UTC)
    query = (select(DagRun.run_id)
             .where(DagRun.dag_id == dag_id, DagRun.run_type == "manual", DagRun.queued_at <= moment,
                    or_(DagRun.start_date.is_(None), DagRun.start_date >= moment))
             .order_by(DagRun.queued_at).limit(1))
    with create_session() as session:
        return session.scalar(query)
