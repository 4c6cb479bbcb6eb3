"""The planning tasks of a pipeline with a table per topic: thin adapters of the core's routes and planner.

Each table is a route (:mod:`tailfill.pipeline.routes`), a pipeline of its own; these tasks resolve the routes
from the broker when they run (parsing the DAG file asks nothing), plan each table as its own pipeline's task
would, and hand each lane or tail its route's ref in the job's arguments, which the operator, the validation
and the plugin's pages resolve back to the route without the broker. A table that cannot be planned does not
hold the others back: it is logged and returned apart, so that the run's last task fails naming it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tailfill.config import PipelineConfig
from tailfill.errors import TailfillError
from tailfill_airflow.hooks import TailfillHook
from tailfill_airflow.naming import BACKFILL, INCREMENTAL, lane_entry, lanes_at_once, tailfill_run_id

log = logging.getLogger(__name__)


def plan_routed_lanes(cfg: PipelineConfig, params: Mapping[str, Any],
                      airflow_run_id: str) -> tuple[list[dict], dict[str, str]]:
    """The backfill form's ``params`` planned for each table of ``cfg`` (limited to the form's topics): the
    form's lanes dealt across the tables, at least one each. Returns the lanes (as the one-table ``plan``
    task's, with ``table`` and ``pipeline``, the route's ref) and the tables that could not be planned, with why."""
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.pipeline.routes import lane_shares, routes_asked
    from tailfill.run.planner import BackfillRequest, plan_backfill_lanes
    from tailfill.run.replay import replay_committed_first
    from tailfill.run.routed import routes_for

    request = BackfillRequest.from_params(params)
    with TailfillHook(cfg).credentials_exported():
        routes, notes = routes_for(cfg, "backfill")
        for note in notes:
            log.info(note)
        chosen = routes_asked(routes, request.topics)
        lanes: list[dict] = []
        failed: dict[str, str] = {}
        for (route, topics), share in zip(chosen, lane_shares(request.lanes, len(chosen)), strict=True):
            first = len(lanes)
            try:
                with open_pipeline(route.cfg) as pipeline:
                    plan = plan_backfill_lanes(
                        pipeline, replace(request, lanes=share, topics=topics),
                        lambda lane, first=first: tailfill_run_id(cfg.name, BACKFILL, airflow_run_id, first + lane))
                    replay_committed_first(pipeline, request.on_committed, plan, log.info)
            except TailfillError as exc:
                log.error("table %s cannot be backfilled: %s", route.table, exc)
                failed[route.table] = str(exc).splitlines()[0]
                continue
            for line in plan.lines:
                (log.warning if line.startswith("warning:") else log.info)("table %s: %s", route.table, line)
            for spec in plan.specs:
                lanes.append(lane_entry(spec) | {"table": route.table, "pipeline": route.cfg.ref})
                log.info("lane %s: %s", len(lanes) - 1, lanes[-1]["label"])
    log.info(lanes_at_once(len(lanes)))
    return lanes, failed


def tune_routed(cfg: PipelineConfig, airflow_run_id: str) -> tuple[list[dict], dict[str, str]]:
    """Each table of ``cfg`` planned as ``tailfill tail --once`` plans it: the tables with offsets waiting (as the
    one-table ``tune`` task's value, with ``table`` and ``pipeline``), and the tables that could not be planned,
    with why. A table that came since the last run starts at its topics' earliest offsets."""
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.run.planner import TailRequest, plan_tail
    from tailfill.run.routed import routes_for

    tails: list[dict] = []
    failed: dict[str, str] = {}
    with TailfillHook(cfg).credentials_exported():
        routes, notes = routes_for(cfg, "tail")
        for note in notes:
            log.info(note)
        for route in routes:
            try:
                with open_pipeline(route.cfg) as pipeline:
                    plan = plan_tail(pipeline, TailRequest(once=True),
                                     tailfill_run_id(cfg.name, INCREMENTAL, airflow_run_id, len(tails)))
            except TailfillError as exc:
                log.error("table %s cannot be tailed: %s", route.table, exc)
                failed[route.table] = str(exc).splitlines()[0]
                continue
            for note in plan.notes:
                log.info("table %s: %s", route.table, note)
            log.info("table %s: %s offsets waiting", route.table, f"{plan.pending:,}")
            if plan.pending:
                tails.append({"run_id": plan.spec.run_id, "table": route.table, "pipeline": route.cfg.ref,
                              "tuning": plan.tuning.to_dict(), "args": plan.spec.argv(), "pending": plan.pending})
    if not tails:
        log.info("nothing new in any table since its committed position: no Spark job")
    return tails, failed


def tables_verdict(what: str, runs: list[dict] | None, unplanned: dict[str, str] | None) -> dict:
    """The verdict of a run of a pipeline with a table per topic, table by table, from each run's validation
    (``runs``: the lanes or tails planned, each with its ``table``, ``pipeline`` and ``run_id``; ``unplanned``:
    the tables that could not start, with why). A table is COMPLETE when every one of its runs was validated
    complete. Logs one line per table and one summing up; raises naming the tables that are not complete."""
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.proof.reports import read_result

    tables: dict[str, dict] = {}
    for run in runs or []:
        with open_pipeline(run["pipeline"]) as route:
            result = read_result(route, run["run_id"])
        mine = tables.setdefault(run["table"], {"verdict": "COMPLETE", "offsets": 0, "runs": 0, "problems": []})
        mine["runs"] += 1
        if result is None or not result.success:
            mine["verdict"] = "INCOMPLETE"
            mine["problems"] += result.problems[:3] if result else [f"run {run['run_id']} was not validated"]
        else:
            mine["offsets"] += result.offsets_checked
    for table, cause in (unplanned or {}).items():
        tables[table] = {"verdict": "NOT STARTED", "offsets": 0, "runs": 0, "problems": [cause]}
    for table, v in sorted(tables.items()):
        (log.info if v["verdict"] == "COMPLETE" else log.error)(
            "table %s: %s, %s offsets in %s run(s)%s", table, v["verdict"], f"{v['offsets']:,}", v["runs"],
            "; " + "; ".join(v["problems"]) if v["problems"] else "")
    failed = sorted(t for t, v in tables.items() if v["verdict"] != "COMPLETE")
    line = (f"{what}: {len(tables) - len(failed)} of {len(tables)} table(s) complete"
            + (f"; not complete: {', '.join(failed)}" if failed else ""))
    out = {"verdict": "INCOMPLETE" if failed else "COMPLETE" if tables else "NOTHING_TO_DO", "summary": line,
           "tables": dict(sorted(tables.items())), "offsets": sum(v["offsets"] for v in tables.values())}
    log.info("%s", line)
    if failed:
        raise TablesIncomplete(line)
    return out


class TablesIncomplete(TailfillError):
    """Some tables of a run with a table per topic did not complete; the message names them."""
