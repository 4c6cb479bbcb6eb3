"""The planning tasks of a pipeline with a table per topic: thin adapters of the core's routes and planner.

Each table is a route (:mod:`tailfill.pipeline.routes`), a pipeline of its own; these tasks resolve the routes
from the broker when they run (parsing the DAG file asks nothing), plan each table as its own pipeline's task
would, and hand each lane or tail its route's ref in the job's arguments, which the operator, the validation
and the plugin's pages resolve back to the route without the broker. A table that cannot be planned does not
hold the others back: it is logged and returned apart, so that the run's last task fails naming it. A table whose
committed offsets the form asked to replay is replayed here, and what the replay did handed on by table, so that the
run's verdict counts it and its validation proves it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from tailfill.config import PipelineConfig
from tailfill.errors import TailfillError
from tailfill.run.verdict import REPLAYED
from tailfill_airflow.hooks import TailfillHook
from tailfill_airflow.naming import BACKFILL, INCREMENTAL, lane_entry, lanes_at_once, replayed_entry, tailfill_run_id

log = logging.getLogger(__name__)


def plan_routed_lanes(cfg: PipelineConfig, params: Mapping[str, Any], airflow_run_id: str,
                      on_replayed: Callable[[dict], None] = lambda _: None) -> tuple[list[dict], dict[str, str]]:
    """The backfill form's ``params`` planned for each table of ``cfg`` (limited to the form's topics): the
    form's lanes dealt across the tables, at least one each. Returns the lanes (as the one-table ``plan``
    task's, with ``table`` and ``pipeline``, the route's ref) and the tables that could not be planned, with why.
    With *Already-committed ranges* ``replay``, each table's committed offsets of the range are replayed first;
    ``on_replayed`` gets what the replays did by table (each as the one-table ``replayed`` XCom, with its
    ``pipeline``), when any did."""
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
        replays: dict[str, dict] = {}
        for (route, topics), share in zip(chosen, lane_shares(request.lanes, len(chosen)), strict=True):
            first = len(lanes)
            try:
                with open_pipeline(route.cfg) as pipeline:
                    plan = plan_backfill_lanes(
                        pipeline, replace(request, lanes=share, topics=topics),
                        lambda lane, first=first: tailfill_run_id(cfg.name, BACKFILL, airflow_run_id, first + lane))
                    replayed = replay_committed_first(pipeline, request.on_committed, plan, log.info)
            except TailfillError as exc:
                log.error("table %s cannot be backfilled: %s", route.table, exc)
                failed[route.table] = str(exc).splitlines()[0]
                continue
            if replayed is not None:
                replays[route.table] = replayed_entry(replayed) | {"pipeline": route.cfg.ref}
            for line in plan.lines:
                (log.warning if line.startswith("warning:") else log.info)("table %s: %s", route.table, line)
            for spec in plan.specs:
                lanes.append(lane_entry(spec) | {"table": route.table, "pipeline": route.cfg.ref})
                log.info("lane %s: %s", len(lanes) - 1, lanes[-1]["label"])
    if replays:
        on_replayed(replays)
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


def tables_verdict(what: str, runs: list[dict] | None, unplanned: dict[str, str] | None,
                   replays: Mapping[str, dict] | None = None) -> dict:
    """The verdict of a run of a pipeline with a table per topic, table by table, from each run's validation
    (``runs``: the lanes or tails planned, each with its ``table``, ``pipeline`` and ``run_id``; ``unplanned``:
    the tables that could not start, with why; ``replays``: a backfill's replays of committed offsets by table, each
    as its validation gave it). A table is COMPLETE when every one of its runs was validated complete, and REPLAYED
    when it only replayed, its replay validated complete. Logs one line per table and one summing up; raises naming
    the tables that are not complete."""
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
    for table, proof in (replays or {}).items():
        mine = tables.setdefault(table, {"verdict": REPLAYED, "offsets": 0, "runs": 0, "problems": []})
        mine |= {"replayed": proof["offsets"], "replay": proof}
        if proof["verdict"] != "COMPLETE":
            mine["verdict"] = "INCOMPLETE"
            mine["problems"] += proof["problems"][:3]
    for table, cause in (unplanned or {}).items():
        tables[table] = {"verdict": "NOT STARTED", "offsets": 0, "runs": 0, "problems": [cause]}
    done = ("COMPLETE", REPLAYED)
    for table, v in sorted(tables.items()):
        replayed = f", {v['replayed']:,} replayed" if v.get("replayed") else ""
        (log.info if v["verdict"] in done else log.error)(
            "table %s: %s, %s offsets in %s run(s)%s%s", table, v["verdict"], f"{v['offsets']:,}", v["runs"],
            replayed, "; " + "; ".join(v["problems"]) if v["problems"] else "")
    failed = sorted(t for t, v in tables.items() if v["verdict"] not in done)
    line = (f"{what}: {len(tables) - len(failed)} of {len(tables)} table(s) complete"
            + (f"; not complete: {', '.join(failed)}" if failed else ""))
    out = {"verdict": "INCOMPLETE" if failed else "COMPLETE" if tables else "NOTHING_TO_DO", "summary": line,
           "tables": dict(sorted(tables.items())), "offsets": sum(v["offsets"] for v in tables.values()),
           "replayed": sum(v.get("replayed", 0) for v in tables.values())}
    log.info("%s", line)
    if failed:
        raise TablesIncomplete(line)
    return out


class TablesIncomplete(TailfillError):
    """Some tables of a run with a table per topic did not complete; the message names them."""
