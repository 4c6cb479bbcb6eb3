"""What happens when a Tailfill task fails or a scheduled run misses its deadline: one headline in
the log and a record the pages can show.

``on_failure`` is every Tailfill task's ``on_failure_callback``. It logs one line (task, run,
the error's first line — for an ingest task, the cause and its fix), records the failure in the
pipeline's shared run state (``failures/`` under its state root, :mod:`tailfill.state.store`) and,
when ``$TAILFILL_ON_FAILURE`` names a
``module:function``, calls it with the context and that record (alerting: mail, chat, pager).
``objective_missed`` records and alerts a tail run that missed its freshness objective as a warning
(``tail.on_missed_objective: warn``: the run succeeds; by default the ``objective`` task fails instead, and
``on_failure`` records and alerts it). ``deadline_missed`` is the incremental DAG's deadline alert
(``tail.run_deadline_seconds``, run by Airflow's triggerer): a run still going that long after it was queued
is recorded the same way.
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any

from tailfill.errors import TailfillError
from tailfill.pipeline.load import load_pipeline
from tailfill.redact import redact_text
from tailfill.settings import settings
from tailfill.state.records import FailureRecord
from tailfill.state.store import StateStore, record_failure
from tailfill_airflow.naming import split_dag_id

log = logging.getLogger(__name__)
HOOK_ENV = "TAILFILL_ON_FAILURE"


def failure_record(context: Any) -> dict:
    """The failure as one JSON-able record: where, which try, and the error's first line (secrets redacted)."""
    ti = context["ti"]
    error = context.get("exception")
    first = redact_text(str(error).splitlines()[0]) if error is not None and str(error) else type(error).__name__
    return {"at": round(time.time(), 3), "dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id,
            "map_index": ti.map_index, "try_number": ti.try_number, "error": first}


def on_failure(context: Any) -> None:
    """A task failed for good: log its cause first, record it, call the alerting hook."""
    _failed(context, will_retry=False)


def on_retry(context: Any) -> None:
    """A task failed and Airflow will try it again: recorded and alerted too, so an outage that the
    retries ride out is still seen."""
    _failed(context, will_retry=True)


def _failed(context: Any, will_retry: bool) -> None:
    record = failure_record(context) | {"will_retry": will_retry}
    where = f"{record['task_id']}" + (f"[{record['map_index']}]" if record["map_index"] not in (-1, None) else "")
    log.error("%s %s of %s (try %s): %s", "FAILED, WILL RETRY:" if will_retry else "FAILED", where,
              record["run_id"], record["try_number"], record["error"])
    _record(context, record)


def objective_missed(context: Any, message: str) -> dict:
    """A run that went on but missed the tail's freshness objective (``tail.on_missed_objective: warn``):
    logged as a warning, recorded (the run's tab shows it) and sent to the alerting hook."""
    ti = context["ti"]
    record = {"at": round(time.time(), 3), "dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id,
              "map_index": ti.map_index, "try_number": ti.try_number, "error": message, "warning": True}
    log.warning("WARNING %s of %s: %s", record["task_id"], record["run_id"], message)
    _record(context, record)
    return record


async def deadline_missed(interval_seconds: float, context: dict | None = None) -> dict:
    """The incremental DAG's deadline alert: its run was not finished ``interval_seconds`` after it was
    queued (the tail is falling behind: the next scheduled run waits behind this one)."""
    run = (context or {}).get("dag_run") or {}
    record = {"at": round(time.time(), 3), "dag_id": run.get("dag_id"), "run_id": run.get("dag_run_id"),
              "task_id": None, "map_index": None, "try_number": None,
              "error": f"deadline missed: the run was not finished {interval_seconds:g}s after it was queued; "
                       "the next run waits behind it (fix: look at its slowest task, or schedule the DAG less "
                       "often)"}
    log.error("DEADLINE MISSED %s of %s: %s", record["dag_id"], record["run_id"], record["error"])
    _record(context, record)
    return record


def _record(context: Any, record: dict) -> None:
    """Record the failure in its pipeline's run state and call the alerting hook, if one is set."""
    pipeline, _ = split_dag_id(record["dag_id"])
    try:
        record_failure(StateStore.of(load_pipeline(settings().pipelines / f"{pipeline}.yaml")), FailureRecord(**record))
    except (TailfillError, OSError) as exc:  # the headline is logged already; the hook still runs
        log.error("failure of %s not recorded in its run state: %s: %s", record["dag_id"], type(exc).__name__, exc)
    if target := settings().on_failure:
        module, _, name = target.partition(":")
        getattr(importlib.import_module(module), name)(context, record)
