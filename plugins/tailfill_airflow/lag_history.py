"""A pipeline's lag over time: how far behind the tail was at the end of each incremental run.

The incremental DAG's ``report`` task measures, once the run's batches are committed and validated, the
offsets the broker holds beyond what the table committed from the cutover on (:func:`measure_lag`), and keeps
it in its XCom beside the run's freshness objective check. :func:`read_lag_points` reads those XComs back for
the pages (the plugin runs in the API server, which holds Airflow's database): one :class:`LagPoint` per run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the DAG files import this module: parsing them must not load the pipeline's machinery
    from tailfill.pipeline.handle import Pipeline

LAG_RUNS = 20  # the runs a page shows


@dataclass(frozen=True)
class LagPoint:
    """One incremental run's end: offsets still behind, what the run ingested, and its worst batch p95."""

    run_id: str
    at: float  # when the lag was measured (unix seconds)
    behind: int | None  # offsets on the broker not yet committed (None: the broker could not be read)
    offsets: int  # offsets the run validated
    worst_p95: float | None  # the run's worst batch p95 produce-to-commit latency, seconds (None: none measured)

    @classmethod
    def from_report(cls, run_id: str, report: Any) -> LagPoint | None:
        """The point of one ``report`` XCom; None for a report without a lag measurement."""
        if not isinstance(report, dict) or not isinstance(report.get("lag"), dict):
            return None
        lag, objective = report["lag"], report.get("objective") or {}
        return cls(run_id, float(lag["at"]), lag.get("behind"), int(report.get("offsets") or 0),
                   objective.get("worst_p95"))


def measure_lag(pipeline: Pipeline) -> dict:
    """``{"at", "behind"}``: the offsets from the cutover to the broker's end not committed now (``behind`` None,
    with ``unknown`` saying why, when the broker or the table cannot be read: the run's result stands)."""
    from tailfill.run.plan import source_state
    from tailfill.run.planner import pending_offsets

    at = round(time.time(), 3)
    try:
        behind = pending_offsets(source_state(pipeline, pipeline.open_tables()))[1]
    except Exception as exc:  # a catalog's driver error as much as a Tailfill one: the lag is unknown, said so
        return {"at": at, "behind": None, "unknown": f"{type(exc).__name__}: {(str(exc) or '?').splitlines()[0]}"}
    return {"at": at, "behind": behind}


def read_lag_points(dag_id: str, limit: int = LAG_RUNS) -> list[LagPoint]:
    """The lag points of the incremental DAG ``dag_id``'s latest ``limit`` reported runs, oldest first."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = (select(XComModel).where(XComModel.dag_id == dag_id, XComModel.task_id == "report",
                                     XComModel.key == "return_value", XComModel.map_index == -1)
             .order_by(XComModel.timestamp.desc()).limit(limit))
    with create_session() as session:
        rows = [(row.run_id, XComModel.deserialize_value(row)) for row in session.scalars(query)]
    points = [LagPoint.from_report(run_id, value) for run_id, value in rows]
    return sorted((p for p in points if p is not None), key=lambda p: p.at)
