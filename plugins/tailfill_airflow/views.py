"""The Tailfill pages served by Airflow's API server (a FastAPI app mounted at ``/tailfill``).

Every page is addressed by what the Airflow UI knows — DAG id, DAG run id, map index — and asks
Airflow's auth manager whether the user may read that DAG (the UI's session cookie is enough):

- ``/tailfill/run/<dag>/<run>``: every lane of a run, live, the verdict and the links to each lane's
  pages, the Data Docs and the quarantine page (a tab of the DAG run page);
- ``/tailfill/batches/<dag>/<run>/<map index>``: one lane's progress and batch reports (a tab of
  the task instance page, and an extra link of the ingest task); on the maintenance task, a
  backfill's tasks that are not lanes and a lane not started yet, the run's tab (as ``/tailfill/run``);
- ``/tailfill/report/<dag>/<run>/<map index>``: the lane's completeness report (its Data Docs link
  turned into the plugin's);
- ``/tailfill/docs/<dag>/<path>``: the pipeline's Great Expectations Data Docs;
- ``/tailfill/output/<dag>/<run>/<map index>``: the ``spark-submit`` output of the latest try (``?try=N``:
  of try N);
- ``/tailfill/pipeline/<dag>``: the pipeline's live offsets (earliest, cutover, committed, lag) and its lag
  over the latest incremental runs (also on an incremental run's tab);
- ``/tailfill/quarantine/<dag>`` and ``/tailfill/table/<dag>``: counts per partition, and the quarantined
  records or the table's first rows.

A page that cannot read its source (a broker down, a topic missing, the catalog unreachable) answers
with the cause and its fix in the page.

Pages are plain HTML (no script, nothing fetched from outside) with a refresh while a run is going, until its
verdict; ``<body data-refresh>`` says which. Nothing here changes any state.
"""

from __future__ import annotations

import html
import logging
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse

from tailfill.errors import TailfillError
from tailfill.pipeline.handle import Pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.redact import redact_text
from tailfill.run.runtime import log_dir
from tailfill.run.tail_health import describe as describe_tail
from tailfill.run.tail_health import read_tail
from tailfill.settings import settings
from tailfill.state.records import FailureRecord, TailHealth
from tailfill.state.store import StateStore, read_failures, read_lane, run_exists, run_reports
from tailfill.state.tail_verdict import tail_verdict
from tailfill.values.drift import describe, unknown_in
from tailfill.values.freshness import Freshness
from tailfill_airflow.causes import FAILURE_KEY
from tailfill_airflow.handover import HANDED_OVER_KEY, handover_headline
from tailfill_airflow.lag_history import LagPoint, read_lag_points
from tailfill_airflow.naming import (
    BACKFILL,
    INCREMENTAL,
    MAINTENANCE,
    REPLAY_LANE,
    REPLAYED_KEY,
    split_dag_id,
    tailfill_run_id,
)
from tailfill_airflow.naming import dag_id as dag_id_of
from tailfill_airflow.objective import check_objective
from tailfill_airflow.outcome import Outcome, read_run_state, read_run_tasks, read_xcom, run_outcome
from tailfill_airflow.progress import progress
from tailfill_airflow.sparkline import sparkline

if TYPE_CHECKING:
    from tailfill.config import PipelineConfig
    from tailfill.lake.tables import Tables
    from tailfill.proof.result import ValidationResult

log = logging.getLogger(__name__)
MAX_LANES = 1024
STYLE = """<style>body{font:14px system-ui,sans-serif;margin:16px;color:#222}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}td.l{text-align:left}
.bar{background:#eee;width:240px;height:12px;display:inline-block}.bar i{display:block;height:12px;background:#4c9}
.bad{color:#b00}.good{color:#1a7f37}.muted{color:#777}svg{vertical-align:middle;color:#369}</style>"""


def _authorized():
    """Read access to the DAG named in the path, checked by Airflow's auth manager (cookie or token)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    return Depends(requires_access_dag("GET", DagAccessEntity.RUN))


app = FastAPI(title="Tailfill", description="Progress, reports and proofs of Tailfill's runs")


def pipeline_of(dag_id: str) -> tuple[Pipeline, str]:
    """The pipeline behind a DAG id (its handle: nothing opened until a page asks) and the DAG's kind; 404 when it
    is not one of Tailfill's."""
    try:
        name, kind = split_dag_id(dag_id)
    except ValueError as exc:
        raise HTTPException(404, str(exc)) from None
    path = settings().pipelines / f"{name}.yaml"
    if not path.exists():
        raise HTTPException(404, f"pipeline {name!r}: no {path}")
    return Pipeline(load_pipeline(path)), kind


def map_index_of(value: str) -> int:
    """A task's map index from a page's URL; -1 for a task that is not mapped.

    Airflow fills the tab's ``{MAP_INDEX}`` only for mapped tasks: for the others (tail, preflight,
    maintain) the page received the placeholder itself, and answered with a parsing error.
    """
    return int(value) if value.removeprefix("-").isdigit() else -1


def lane_run_id(pipeline: str, kind: str, run_id: str, map_index: str | int, routed: bool = False) -> str:
    """The Tailfill run id of a lane (``routed``: of a pipeline with a table per topic, whose tails are mapped)."""
    index = map_index_of(str(map_index))
    mapped = kind == BACKFILL or (routed and kind == INCREMENTAL)
    return tailfill_run_id(pipeline, kind, run_id, index if mapped and index >= 0 else None)


def table_pipelines(pipeline: Pipeline) -> dict[str, Pipeline]:
    """Of a pipeline with a table per topic, each table it has routed to and the pipeline that runs it (read
    from its run state once per page); none for a pipeline of one table."""
    if not pipeline.cfg.target.routed:
        return {}
    from tailfill.run.routed import known_routes

    return {route.table: Pipeline(route.cfg) for route in known_routes(pipeline.cfg)}


def lane_of(pipeline: Pipeline, kind: str, run_id: str, map_index: str | int,
            tables: dict[str, Pipeline] | None = None) -> tuple[Pipeline, str]:
    """The pipeline whose run state holds a lane (of a pipeline with a table per topic: its table's, among
    ``tables``, default :func:`table_pipelines`), and the lane's run id."""
    routed = pipeline.cfg.target.routed
    tf_run = lane_run_id(pipeline.name, kind, run_id, map_index, routed)
    for owner in (table_pipelines(pipeline) if tables is None else tables).values():
        if run_exists(owner.state, tf_run):
            return owner, tf_run
    return pipeline, tf_run


def of_table(pipeline: Pipeline, table: str | None) -> Pipeline | None:
    """The pipeline a page shows: ``pipeline`` itself; of one with a table per topic, its table ``table``'s (404
    when it has none such), or None when no table was named (the page lists them: :func:`tables_index`)."""
    if not pipeline.cfg.target.routed:
        return pipeline
    if table is None:
        return None
    found = table_pipelines(pipeline).get(table)
    if found is None:
        raise HTTPException(404, f"pipeline {pipeline.name} has no table {table!r} (yet: a run finds its topics' "
                                 "tables)")
    return found


def tables_index(pipeline: Pipeline, what: str) -> HTMLResponse:
    """The page of a pipeline with a table per topic that needs a table: a link to it for each of its tables."""
    from tailfill.run.routed import known_routes

    routes = known_routes(pipeline.cfg)
    items = "".join(f'<li><a href="?table={quote(r.table)}">{html.escape(r.table)}</a> '
                    f'<span class=muted>({html.escape(", ".join(r.topics))})</span></li>' for r in routes)
    body = (f"<p>{html.escape(pipeline.name)} routes {html.escape(pipeline.cfg.source.described)} to a table per "
            f"topic by <code>{html.escape(pipeline.cfg.target.table)}</code>. Its tables:</p>"
            + (f"<ul class=tables>{items}</ul>" if items else
               "<p class=muted>none yet: the first backfill or tail run finds its topics' tables.</p>"))
    return _page(f"{pipeline.name} · {what}", body)


def lane_progress(store: StateStore, tf_run: str, tail: bool = True) -> dict:
    """A lane's progress as its task saw it last, recomputed from its batch reports now (freshness of a ``tail``
    only)."""
    lane = read_lane(store, tf_run)
    reports = run_reports(store, tf_run)
    state = (lane.state if lane else None) or ("running" if lane else "not started")
    ended = lane.ended_at if lane else None
    started = lane.started_at if lane and lane.started_at is not None else time.time()
    out = progress(reports, lane.planned if lane else None, started, now=ended or time.time(), state=state,
                   tail=tail, restarts=lane.restarts if lane else ()).asdict()
    return {"label": (lane.label if lane else None) or tf_run, "run_id": tf_run,
            "try_number": lane.try_number if lane else None, "restarts": lane.restarts if lane else [],
            "cause": redact_text(lane.cause) if lane and lane.cause else None, **out}


def _page(title: str, body: str, refresh: bool = False, every: int = 5) -> HTMLResponse:
    """A page; with ``refresh``, one that reloads itself every ``every`` seconds. ``<body data-refresh>`` says
    which (``every 5s`` or ``final``): a page whose state is final sets no timer."""
    meta = f'<meta http-equiv="refresh" content="{every}">' if refresh else ""
    mark = f"every {every}s" if refresh else "final"
    return HTMLResponse(f"<!doctype html><html><head><meta charset=utf-8>{meta}<title>{html.escape(title)}</title>"
                        f'{STYLE}</head><body data-refresh="{mark}"><h2>{html.escape(title)}</h2>{body}</body></html>')


def _bar(p: dict) -> str:
    pct = p["percent"] if p["percent"] is not None else (100 if p["state"] == "finished" else 0)
    return f'<span class="bar" title="{pct}%"><i style="width:{min(pct, 100)}%"></i></span>'


def _lane_rows(lanes: list[dict], freshness: bool = True) -> str:
    """A table of lanes; ``freshness`` only for the tail (for history it says how old the history is). A stalled
    lane (restarted, nothing committed since) shows no rate or ETA, and ``stalled: <cause>`` under it."""
    head = ("<tr><th>lane</th><th>state</th><th>progress</th><th>offsets</th><th>rows/s</th><th>ETA</th>"
            "<th>batches</th>" + ("<th>freshness</th>" if freshness else "") + "</tr>")
    rows = []
    for p in lanes:
        fresh = str(Freshness.from_dict(p["freshness"])) if p.get("freshness") else ""
        planned = f"/{p['offsets_planned']:,}" if p["offsets_planned"] else ""
        cls = ' class="bad"' if p["state"] == "failed" else ""
        state = p["state"] + (f", try {p['try_number']}" if p.get("try_number") else "") + restart_count(p)
        rate = "-" if p.get("stalled") else f"{p['rows_per_s']:,.0f}"
        rows.append(f"<tr><td class=l>{html.escape(p['label'])}</td><td{cls}>{html.escape(state)}</td>"
                    f"<td class=l>{_bar(p)} {p['percent'] if p['percent'] is not None else '-'}%</td>"
                    f"<td>{p['offsets_done']:,}{planned}</td><td>{rate}</td>"
                    f"<td>{p['eta_s'] if p['eta_s'] is not None else '-'}</td><td>{p['batches']}</td>"
                    + (f"<td>{html.escape(fresh) or '-'}</td>" if freshness else "") + "</tr>")
        if p.get("stalled"):  # the last restart's cause, said as the job says it
            rows.append(f'<tr><td colspan=8 class="l bad stalled">stalled: {html.escape(p["stalled"])}</td></tr>')
        elif p.get("restarts"):
            last = p["restarts"][-1]
            rows.append(f'<tr><td colspan=8 class="l restarts">last restart (try {last["try"]}, '
                        f'{time.strftime("%H:%M:%S", time.gmtime(last["at"]))} UTC, at {html.escape(last["step"])}): '
                        f'{html.escape(last["cause"])}</td></tr>')
        if p.get("cause"):
            rows.append(f'<tr><td colspan=8 class="l bad">{html.escape(p["cause"])}</td></tr>')
    return f"<table>{head}{''.join(rows)}</table>"


def restart_count(p: dict) -> str:
    """``, N restarts`` of a lane: the job's restarts of its queries, in every try."""
    n = len(p.get("restarts") or ())
    return f", {n} restart{'s' if n != 1 else ''}" if n else ""


def _restart_rows(restarts: list[dict], output: str) -> str:
    """A lane's restarts, each linked to its try's job output (``output``: the lane's output page)."""
    if not restarts:
        return ""
    rows = "".join(
        f"<tr><td>{r['try']}</td><td class=l>{time.strftime('%H:%M:%S', time.gmtime(r['at']))}</td>"
        f"<td>{r['failures']}/{r['tolerated']}</td><td class=l>{html.escape(r['step'])}</td>"
        f"<td class=l>{html.escape(r['cause'])}</td><td>{r['wait_seconds']:g}</td>"
        f'<td class=l><a href="{output}?try={r["try"]}" target="_blank" rel="noopener">output of try {r["try"]}</a>'
        "</td></tr>"
        for r in restarts)
    return ("<h3>Restarts of the job's queries</h3><table class=restarts><tr><th>try</th><th>at (UTC)</th>"
            "<th>failures/tolerated</th><th>step</th><th>cause</th><th>wait s</th><th>Spark output</th></tr>"
            f"{rows}</table>")


def run_lanes(pipeline: Pipeline, kind: str, run_id: str) -> list[tuple[int, dict, Pipeline]]:
    """The lanes of a run that have started, with their map index (-1: the tail) and the pipeline whose state holds
    each (of a pipeline with a table per topic: its table's, whose name the lane's progress has as ``table``);
    none for upkeep."""
    routed = pipeline.cfg.target.routed
    mapped = kind == BACKFILL or (routed and kind == INCREMENTAL)
    tables = table_pipelines(pipeline)
    lanes = []
    for index in range(MAX_LANES if mapped else 1 if kind == INCREMENTAL else 0):
        owner, tf_run = lane_of(pipeline, kind, run_id, index, tables)
        if not run_exists(owner.state, tf_run):
            break
        p = lane_progress(owner.state, tf_run, tail=kind != BACKFILL) \
            | ({"table": owner.cfg.target.table} if routed else {})
        lanes.append((index if mapped else -1, p, owner))
    return lanes


def run_failures(store: StateStore, dag_id: str, run_id: str) -> list[FailureRecord]:
    """The failures the run's tasks recorded (retried tries included), oldest first."""
    return [f for f in read_failures(store) if f.dag_id == dag_id and f.run_id == run_id]


@app.get("/run/{dag_id}/{run_id}", response_class=HTMLResponse, dependencies=[_authorized()])
def run_page(dag_id: str, run_id: str) -> HTMLResponse:
    pipeline, kind = pipeline_of(dag_id)
    indexed = run_lanes(pipeline, kind, run_id)
    lanes = [p for _, p, _ in indexed]
    failures = run_failures(pipeline.state, dag_id, run_id)
    replayed = (read_xcom(dag_id, run_id, "plan", key=REPLAYED_KEY) if kind == BACKFILL else None) or {}
    # a table per topic: each lane's report links its table's, each table's replay its own
    links = run_links(dag_id, run_id, [(i, p["label"]) for i, p, _ in indexed],
                      docs=data_docs_site(pipeline).is_dir(),
                      replays=sorted(replayed) if pipeline.cfg.target.routed else [None] if replayed else [])
    tries = _failure_rows(failures)
    lag = lag_section(read_lag_points(dag_id)) if kind == INCREMENTAL else ""
    if not lanes:
        handed = read_xcom(dag_id, run_id, "tune", key=HANDED_OVER_KEY) if kind == INCREMENTAL else None
        outcome = run_outcome(kind, read_run_tasks(dag_id, run_id), failures,
                              lambda task_id: read_xcom(dag_id, run_id, task_id),
                              lambda task_id: read_xcom(dag_id, run_id, task_id, key=FAILURE_KEY),
                              handed_over=handover_headline(handed, dag_id))
        return _page(f"{dag_id} · {run_id}", _outcome_html(outcome, dag_id, run_id) + tries + lag + links,
                     refresh=outcome.running)
    from tailfill.proof.reports import read_result

    done = sum(p["offsets_done"] for p in lanes)
    planned = sum(p["offsets_planned"] or 0 for p in lanes)
    quarantined = sum(p["quarantined"] for p in lanes)
    stored = sum(p["rows"] for p in lanes) - quarantined
    results = [read_result(owner, p["run_id"]) for _, p, owner in indexed]
    run_state = read_run_state(dag_id, run_id) if None in results else None
    cls, text = verdict(results, run_state)
    summary = (f'<p class="{cls}"><b>{html.escape(text)}</b></p>'
               f"<p><b>{done:,}</b>{f' of {planned:,}' if planned else ''} offsets: {stored:,} rows + "
               f"{quarantined:,} quarantined in {len(lanes)} lane(s); "
               f"{sum(p['rows_per_s'] for p in lanes):,.0f} rows/s together.</p>")
    if pipeline.cfg.target.routed:
        summary += tables_html(lanes, results)
    if kind == INCREMENTAL:
        for _, p, owner in indexed:
            check = check_objective(pipeline.cfg.tail.freshness_seconds, run_reports(owner.state, p["run_id"]),
                                    p.get("restarts") or (), p.get("try_number") or 1)
            of = f"table {p['table']}: " if "table" in p else ""
            summary += f'<p class="{"good" if check.met else "bad"} objective">{html.escape(of + check.asstr())}</p>'
            if p["state"] == "running":  # the tail's verdict now, as status says it
                summary += tail_health_html(owner.cfg, *read_tail(owner.state))
    for owner in dict.fromkeys(o for _, _, o in indexed):
        summary += unknown_fields_html(owner, [p["run_id"] for _, p, o in indexed if o is owner])
    going = verdict_pending(lanes, cls, lambda: run_state or read_run_state(dag_id, run_id))
    return _page(f"{dag_id} · {run_id}",
                 summary + _lane_rows(lanes, freshness=kind != BACKFILL) + tries + lag + links, refresh=going)


def lag_section(points: list[LagPoint]) -> str:
    """The pipeline's lag over its latest incremental runs: offsets still behind at each run's end and the run's
    worst batch p95 freshness, as two sparklines and a table, oldest run first."""
    if not points:
        return ("<h3>Lag over time</h3><p class=\"muted lag\">no incremental run has reported its lag yet</p>")
    labels = [f"{p.run_id}: {'?' if p.behind is None else f'{p.behind:,}'} behind" for p in points]
    behind = sparkline([p.behind for p in points], labels, "lag-behind")
    fresh = sparkline([p.worst_p95 for p in points], [f"{p.run_id}: p95 {_seconds(p.worst_p95)}" for p in points],
                      "lag-p95")
    rows = "".join(f"<tr class=lag-point><td class=l>{html.escape(p.run_id)}</td>"
                   f"<td class=l>{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(p.at))}</td><td>{p.offsets:,}</td>"
                   f"<td class=behind>{'?' if p.behind is None else f'{p.behind:,}'}</td>"
                   f"<td class=p95>{_seconds(p.worst_p95)}</td></tr>" for p in points)
    return (f"<h3>Lag over time (the latest {len(points)} incremental run(s))</h3>"
            f"<p>offsets behind at run end {behind}</p><p>worst batch p95 freshness {fresh}</p>"
            "<table class=lag><tr><th>run</th><th>run end (UTC)</th><th>offsets ingested</th>"
            f"<th>offsets behind at run end</th><th>worst batch p95</th></tr>{rows}</table>")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}s"


def unknown_fields_html(pipeline: Pipeline, run_ids: list[str]) -> str:
    """The line naming the JSON fields not declared that the runs' records held (empty without any)."""
    unknown = unknown_in(r.unknown_fields for run_id in dict.fromkeys(run_ids)
                         for r in run_reports(pipeline.state, run_id))
    if not unknown:
        return ""
    return (f'<p class="bad unknown-fields">fields not declared (format.unknown_fields: '
            f"{html.escape(pipeline.cfg.format.unknown_fields)}): {html.escape(describe(unknown))}</p>")


def task_log_link(dag_id: str, run_id: str, task_id: str, text: str = "its log") -> str:
    """A link from a run's page (``/tailfill/run/<dag>/<run>``) to a task's log in the Airflow UI."""
    href = f"../../../dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}/tasks/{quote(task_id)}"
    return f'<a href="{href}" target="_blank" rel="noopener">{html.escape(text)}</a>'


def _outcome_html(outcome: Outcome, dag_id: str, run_id: str) -> str:
    log = f" ({task_log_link(dag_id, run_id, outcome.task_id)})" if outcome.task_id else ""
    details = "".join(f"<li>{html.escape(line)}</li>" for line in outcome.details)
    return (f'<p class="{outcome.cls} outcome"><b>{html.escape(outcome.text)}</b>{log}</p>'
            + (f"<ul>{details}</ul>" if details else ""))


def _failure_rows(failures: list[FailureRecord]) -> str:
    """The run's failed tries, each with its task, try, whether Airflow retried it, and its cause."""
    if not failures:
        return ""
    rows = "".join(
        f"<tr><td class=l>{html.escape(time.strftime('%H:%M:%S', time.gmtime(f.at)))}</td>"
        f"<td class=l>{html.escape(f.task_id or 'the run')}"
        f"{'' if f.map_index in (None, -1) else f'[{f.map_index}]'}</td><td>{f.try_number or '-'}</td>"
        f"<td class=l>{'warning' if f.warning else 'retried' if f.will_retry else 'failed'}</td>"
        f"<td class=\"l bad\">{html.escape(redact_text(f.error))}</td></tr>" for f in failures)
    return ("<h3>Failed tries and warnings</h3><table class=failures><tr><th>at (UTC)</th><th>task</th>"
            f"<th>try</th><th>then</th><th>cause</th></tr>{rows}</table>")


def run_links(dag_id: str, run_id: str, lanes: list[tuple[int, str]], docs: bool = True,
              replays: Sequence[str | None] = ()) -> str:
    """The run's links: the completeness report of each replay of committed offsets of a backfill (``replays``: the
    tables that replayed, of a pipeline with a table per topic, or ``[None]`` for a pipeline's one table), each
    started lane's report, progress and job output (``lanes``: map index and label; the tail's index is -1), then
    the pipeline's Data Docs (``docs``: once a validation made them), quarantine and offsets."""
    dag, run = quote(dag_id), quote(run_id, safe="")

    def a(path: str, text: str) -> str:
        # relative to /tailfill/run/<dag>/<run>: right under any base URL path Airflow is served at
        return f'<a href="../../{path}" target="_blank" rel="noopener">{html.escape(text)}</a>'

    def lane(index: int) -> str:
        return " · ".join(a(f"{page}/{dag}/{run}/{index}", text) for page, text in
                          (("report", "completeness report"), ("batches", "progress and batch reports"),
                           ("output", "Spark job output")))

    per_lane = "".join(
        f"<li>replay of committed offsets{f' of table {html.escape(table)}' if table else ''}: "
        f"{a(f'report/{dag}/{run}/{REPLAY_LANE}' + (f'?table={quote(table)}' if table else ''), 'completeness report')}"
        "</li>" for table in replays)
    per_lane += "".join(f"<li>{html.escape(label)}: {lane(i)}</li>" for i, label in lanes)
    pipeline = " · ".join(((a(f"docs/{dag}/index.html", "Data Docs"),) if docs else ())
                          + (a(f"quarantine/{dag}", "quarantined records and counts per partition"),
                             a(f"table/{dag}", "table preview"),
                             a(f"pipeline/{dag}", "live offsets")))
    return f'<h3>Links</h3><ul class="links">{per_lane}<li>{pipeline}</li></ul>'


def verdict_pending(lanes: list[dict], verdict_cls: str, run_state: Callable[[], str | None]) -> bool:
    """Whether a run's tab must refresh: a lane still runs, or no verdict yet (``verdict_cls`` ``muted``) while
    the run goes on (its validations give the verdict). Once validation ended, or the run did, the tab is final."""
    if any(p["state"] == "running" for p in lanes):
        return True
    return verdict_cls == "muted" and run_state() not in ("success", "failed")


def tables_html(lanes: list[dict], results: list[ValidationResult | None]) -> str:
    """The verdict of each table of a run of a pipeline with a table per topic (``lanes``' ``table``)."""
    by_table: dict[str, list[ValidationResult | None]] = {}
    for p, result in zip(lanes, results, strict=True):
        by_table.setdefault(p["table"], []).append(result)
    rows = []
    for table, mine in sorted(by_table.items()):
        cls, text = verdict(mine)
        rows.append(f'<tr><td class=l>{html.escape(table)}</td><td class="l {cls}">{html.escape(text)}</td></tr>')
    return f"<table class=tables><tr><th>table</th><th>verdict</th></tr>{''.join(rows)}</table>"


def verdict(results: list[ValidationResult | None], run_state: str | None = None) -> tuple[str, str]:
    """The run's verdict at a glance from its lanes' validations: (css class, text). Lanes still waiting for
    their validation in a run Airflow has failed (``run_state``) will never get it: that run is FAILED."""
    failed = [r for r in results if r is not None and not r.success]
    if failed:
        problems = "; ".join(p for r in failed for p in r.problems[:3])
        return "bad", f"INCOMPLETE ({len(failed)} of {len(results)} lane(s)): {problems}"
    waiting = sum(r is None for r in results)
    if waiting and run_state == "failed":
        return "bad", (f"FAILED: {waiting} of {len(results)} lane(s) never validated: the run failed "
                       "(its failed tries and their cause below)")
    if waiting:
        return "muted", f"not validated yet: {waiting} of {len(results)} lane(s) waiting for their validation"
    checked = sum(r.offsets_checked for r in results if r is not None)
    return "good", f"COMPLETE: every one of {checked:,} offsets landed exactly once ({len(results)} lane(s) validated)"


@app.get("/batches/{dag_id}/{run_id}/{map_index}", response_class=HTMLResponse, dependencies=[_authorized()])
def batches_page(dag_id: str, run_id: str, map_index: str) -> HTMLResponse:
    """A lane's tab: progress, restarts, failed tries, links, batches. For the maintenance task, a backfill's
    tasks that are not lanes and a lane that has not started, the run's tab (:func:`run_page`)."""
    base, kind = pipeline_of(dag_id)
    pipeline, tf_run = lane_of(base, kind, run_id, map_index)  # for a table per topic, the lane's table's
    if kind == MAINTENANCE or (kind == BACKFILL and map_index_of(map_index) < 0) \
            or not run_exists(pipeline.state, tf_run):  # not a lane, or one not started: what the run did
        return run_page(dag_id, run_id)
    p = lane_progress(pipeline.state, tf_run, tail=kind != BACKFILL)
    lane = read_lane(pipeline.state, tf_run)
    head = ("<tr><th>try</th><th>batch</th><th>committed at (UTC)</th><th>offsets</th><th>rows</th>"
            "<th>quarantined</th><th>seconds</th><th>commit ms</th><th>ranges</th></tr>")
    rows = [f"<tr><td>{(lane.try_at(r.at) if lane else None) or '-'}</td><td>{r.batch_id}</td>"
            f"<td>{time.strftime('%H:%M:%S', time.gmtime(r.at))}</td><td>{r.offsets:,}</td>"
            f"<td>{r.rows:,}</td><td>{r.quarantined:,}</td><td>{r.seconds:.1f}</td><td>{r.commit_ms:.0f}</td>"
            f"<td class=l>{html.escape(', '.join(map(str, r.committed)) or 'replay: already committed')}</td></tr>"
            for r in run_reports(pipeline.state, tf_run)]
    index = map_index_of(map_index)
    tries = [f for f in run_failures(base.state, dag_id, run_id) if f.task_id in ("ingest_slice", "tail")
             and (f.map_index if f.map_index is not None else -1) == index]
    here = f"{quote(dag_id)}/{quote(run_id, safe='')}/{index}"  # relative to /tailfill/batches/<dag>/<run>/<index>
    links = f'<p><a href="../../../output/{here}" target="_blank" rel="noopener">Spark job output (latest try)</a></p>'
    body = (f"<p class=muted>run {html.escape(tf_run)}</p>{_lane_rows([p], freshness=kind != BACKFILL)}"
            f"{_restart_rows(p['restarts'], f'../../../output/{here}')}{_failure_rows(tries)}{links}<h3>Batches</h3>"
            f"<table>{head}{''.join(rows) or '<tr><td colspan=9>none committed yet</td></tr>'}</table>")
    return _page(f"{p['label']} · progress", body, refresh=p["state"] == "running")


@app.get("/report/{dag_id}/{run_id}/{map_index}", response_class=HTMLResponse, dependencies=[_authorized()])
def report_page(dag_id: str, run_id: str, map_index: str, table: str | None = None) -> HTMLResponse:
    """A lane's completeness report; ``replay`` for the map index: the report of the backfill's replay of committed
    offsets (``?table=``: of that table's replay, in a pipeline with a table per topic)."""
    from tailfill.plumbing.warehouse import fs_path
    from tailfill.proof.reports import results_uri

    if map_index == REPLAY_LANE:  # the backfill's replay of committed offsets, validated by its summary task
        base = pipeline_of(dag_id)[0]
        pipeline = of_table(base, table)
        if pipeline is None:
            raise HTTPException(404, f"pipeline {base.name} has a table per topic: name the replay's table "
                                     "(?table=<table>)")
        replayed = read_xcom(dag_id, run_id, "plan", key=REPLAYED_KEY) or {}
        tf_run = ((replayed.get(table) or {}) if table else replayed).get("run_id", "none")
    else:
        pipeline, tf_run = lane_of(*pipeline_of(dag_id), run_id, map_index)
    try:
        with pipeline.fs.open_input_stream(fs_path(f"{results_uri(pipeline.cfg)}/{tf_run}.html")) as f:
            table = pipeline.cfg.target.table if pipeline.cfg.route else None
            return HTMLResponse(served_docs_links(f.read().decode(), dag_id, table))
    except (FileNotFoundError, OSError):
        return _page(f"{tf_run}: not validated yet",
                     "<p>The completeness report appears here once the run's validation task has run.</p>",
                     refresh=True)


_LOCAL_DOCS = re.compile(r'href="file://[^"]*/local_site/([^"]*)"')


def served_docs_links(report: str, dag_id: str, table: str | None = None) -> str:
    """A completeness report with its ``file://`` link to the Data Docs turned into the plugin's (``table``: of a
    pipeline with a table per topic, the report's table's)."""
    # relative to /tailfill/report/<dag>/<run>/<map index>
    docs = f"../../../docs/{quote(dag_id)}/" + (f"{quote(table)}/" if table else "")
    return _LOCAL_DOCS.sub(lambda m: f'href="{docs}{m[1]}"', report)


def data_docs_site(pipeline: Pipeline) -> Path:
    """The folder of the pipeline's Great Expectations Data Docs (there once a validation made them)."""
    from tailfill.proof.reports import gx_root

    return (gx_root(pipeline.cfg) / "gx" / "uncommitted" / "data_docs" / "local_site").resolve()


@app.get("/docs/{dag_id}/{path:path}", dependencies=[_authorized()])
def data_docs(dag_id: str, path: str) -> FileResponse:
    """A page of the pipeline's Data Docs; of a pipeline with a table per topic, ``<table>/<page>`` of a table's."""
    pipeline = pipeline_of(dag_id)[0]
    if pipeline.cfg.target.routed:
        table, _, path = path.partition("/")
        pipeline = of_table(pipeline, table) or pipeline
    cfg = pipeline.cfg
    site = data_docs_site(pipeline)
    file = (site / (path or "index.html")).resolve()
    if not file.is_relative_to(site) or not file.is_file():
        raise HTTPException(404, f"no Data Docs page {path!r} for {cfg.name} (validate a run first)")
    return FileResponse(file)


@app.get("/output/{dag_id}/{run_id}/{map_index}", response_class=PlainTextResponse, dependencies=[_authorized()])
def job_output(dag_id: str, run_id: str, map_index: str, try_number: int | None = Query(None, alias="try")) \
        -> PlainTextResponse:
    """The job output of a lane's latest try (``?try=N``: of that try)."""
    owner, tf_run = lane_of(*pipeline_of(dag_id), run_id, map_index)
    folder = log_dir(owner.name, tf_run)
    tries = sorted(folder.glob("spark-submit-try*.log"), key=lambda f: int(f.stem.removeprefix("spark-submit-try")))
    if try_number is not None:
        tries = [f for f in tries if f.stem == f"spark-submit-try{try_number}"]
    if not tries:
        raise HTTPException(404, f"no spark-submit output{'' if try_number is None else f' of try {try_number}'} "
                                 f"in {folder}")
    return PlainTextResponse(f"# {tries[-1]}\n" + redact_text(Path(tries[-1]).read_text(errors="replace")))


@app.get("/pipeline/{dag_id}", response_class=HTMLResponse, dependencies=[_authorized()])
def pipeline_page(dag_id: str, table: str | None = None) -> HTMLResponse:
    """The pipeline's offsets now: earliest, cutover, committed, pending (``?table=``: which table of a pipeline
    with a table per topic), and the tail's lag over its runs."""
    from tailfill_airflow.live import live_context

    base, _ = pipeline_of(dag_id)
    pipeline = of_table(base, table)
    if pipeline is None:
        return tables_index(base, "live offsets")
    cfg = pipeline.cfg
    title = f"{cfg.name}: {cfg.source.subscription} → {cfg.target.namespace}.{cfg.target.table}"
    try:
        with pipeline:
            ctx = live_context(pipeline)
            health, unknown = read_tail(pipeline.state)
    except TailfillError as exc:
        return problem_page(title, "the live offsets cannot be read", exc)
    lag = lag_section(read_lag_points(dag_id_of(base.name, INCREMENTAL)))
    return _page(title, f"<pre>{html.escape(ctx['text'])}</pre>{tail_health_html(cfg, health, unknown)}{lag}")


def tail_health_html(cfg: PipelineConfig, health: TailHealth | None, unknown: str | None = None,
                     now: float | None = None) -> str:
    """The live tail's verdict, as ``tailfill status`` prints it: red when it is behind its objective or cannot
    keep up (``unknown``: why ``health`` is None)."""
    lines = describe_tail(cfg, health, now=now, unknown=unknown)
    behind = health is not None and tail_verdict(health).behind
    return "".join(f'<p class="{"bad" if behind or line.startswith("WARNING") else "muted"} tail-health">'
                   f"{html.escape(line)}</p>" for line in lines)


def problem_page(title: str, what: str, exc: BaseException, status: int = 503) -> HTMLResponse:
    """A page that could not be made: what, the cause (its first line, secrets redacted) and its fix."""
    cause = redact_text(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    fix = getattr(exc, "fix", None) if "(fix:" not in cause else None
    body = (f'<p class="bad problem"><b>{html.escape(what)}</b>: {html.escape(type(exc).__name__)}: '
            f"{html.escape(cause)}</p>" + (f"<p>Fix: {html.escape(str(fix))}.</p>" if fix else "")
            + "<p class=muted>This page reloads every 30 s.</p>")
    page = _page(title, body, refresh=True, every=30)
    page.status_code = status
    return page


@app.exception_handler(Exception)
async def unexpected_error(request: Request, exc: Exception) -> HTMLResponse:
    """Any other failure of a page: its cause in the page, not a bare ``Internal Server Error``."""
    log.exception("Tailfill page %s failed", request.url.path)
    return problem_page(f"Tailfill: {request.url.path}", "this page could not be made", exc, status=500)


QUARANTINE_ROWS = 500  # the most recent quarantined records a page lists
PREVIEW_ROWS = 50  # the rows the table preview shows


def _counts_table(counts: dict) -> str:
    head = "<tr><th>partition</th><th>committed offsets</th><th>rows</th><th>quarantined</th></tr>"
    rows = "".join(f"<tr><td class=l>{html.escape(str(tp))}</td><td>{c['committed']:,}</td><td>{c['rows']:,}</td>"
                   f"<td>{c['quarantined']:,}</td></tr>" for tp, c in counts.items())
    return (f"<h3>Counts per partition</h3><table class=counts>{head}"
            f"{rows or '<tr><td colspan=4>none</td></tr>'}</table>")


@app.get("/quarantine/{dag_id}", response_class=HTMLResponse, dependencies=[_authorized()])
def quarantine_page(dag_id: str, table: str | None = None) -> HTMLResponse:
    """The table's counts per partition, and the quarantined records: offsets, error, run, raw value (``?table=``:
    which table of a pipeline with a table per topic)."""
    base, _ = pipeline_of(dag_id)
    pipeline = of_table(base, table)
    if pipeline is None:
        return tables_index(base, "quarantine")
    cfg = pipeline.cfg
    also = f"?table={quote(table)}" if table else ""
    try:
        with pipeline:
            counts, records = table_contents(pipeline, QUARANTINE_ROWS)
    except TailfillError as exc:
        return problem_page(f"{cfg.name} · quarantine", "the tables cannot be read", exc)
    listed = "".join(
        f"<tr><td class=l>{html.escape(r['kafka_topic'])}[{r['kafka_partition']}]</td><td>{r['kafka_offset']:,}</td>"
        f"<td class=l>{html.escape(redact_text(r['error'] or ''))}</td>"
        f"<td class=l>{html.escape(r['run_id'] or '')}</td>"
        f"<td class=l><code>{html.escape(_preview(r['kafka_value']))}</code></td></tr>" for r in records)
    total_bad = sum(c["quarantined"] for c in counts.values())
    body = (f'{_counts_table(counts)}<p><a href="../table/{quote(dag_id)}{also}">the table\'s first rows</a></p>'
            f"<h3>Quarantined records ({total_bad:,}; the {min(total_bad, QUARANTINE_ROWS):,} latest offsets "
            f"listed)</h3><table><tr><th>partition</th><th>offset</th><th>error</th><th>run</th><th>raw value</th>"
            f"</tr>{listed or '<tr><td colspan=5>none</td></tr>'}</table>")
    return _page(f"{cfg.name} · {cfg.target.namespace}.{cfg.target.table} · quarantine", body)


@app.get("/table/{dag_id}", response_class=HTMLResponse, dependencies=[_authorized()])
def table_page(dag_id: str, table: str | None = None) -> HTMLResponse:
    """The table's counts per partition and its first rows, every column (``?table=``: which table of a pipeline
    with a table per topic)."""
    base, _ = pipeline_of(dag_id)
    pipeline = of_table(base, table)
    if pipeline is None:
        return tables_index(base, "preview")
    cfg = pipeline.cfg
    also = f"?table={quote(table)}" if table else ""
    title = f"{cfg.name} · {cfg.target.namespace}.{cfg.target.table} · preview"
    try:
        with pipeline:
            tables = pipeline.open_tables()  # once: the counts and the rows read the same snapshots
            if tables is None:  # never made
                counts, columns, rows = {}, [], []
            else:
                counts, _ = table_contents(pipeline, 0, tables=tables)
                columns, rows = table_preview(pipeline, PREVIEW_ROWS, tables=tables)
    except TailfillError as exc:
        return problem_page(title, "the table cannot be read", exc)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td class=l>{html.escape(_cell(r[c]))}</td>" for c in columns) + "</tr>"
                   for r in rows)
    stored = sum(c["rows"] for c in counts.values())
    return _page(title, f'{_counts_table(counts)}<p><a href="../quarantine/{quote(dag_id)}{also}">quarantined '
                        f"records</a></p><h3>First rows ({min(stored, len(rows)):,} of {stored:,})</h3>"
                        f"<table class=preview><tr>{head}</tr>{body or '<tr><td>none</td></tr>'}</table>")


def table_preview(pipeline: Pipeline, limit: int, tables: Tables | None = None) -> tuple[list[str], list[dict]]:
    """The data table's columns and its first ``limit`` rows as stored (none while it was never made); of
    ``tables`` when the caller opened them already."""
    if tables is None:
        tables = pipeline.open_tables()  # as they are (loaded now): a page changes nothing
    if tables is None:
        return [], []
    arrow = tables.data.scan(limit=limit).to_arrow()
    return arrow.column_names, arrow.to_pylist()


def _cell(value: object, size: int = 80) -> str:
    if isinstance(value, bytes):
        return _preview(value, size)
    text = "(null)" if value is None else str(value)
    return text if len(text) <= size else text[:size] + " …"


def table_contents(pipeline: Pipeline, limit: int, tables: Tables | None = None) -> tuple[dict, list[dict]]:
    """Per partition: offsets the ledger committed, rows and quarantined rows stored; and the ``limit``
    quarantined records with the highest offsets, newest first (nothing while the tables were never made); of
    ``tables`` when the caller opened them already."""
    import pyarrow.compute as pc

    from tailfill.lake.ledger import read_ledger
    from tailfill.offsets import TopicPartition, by_partition, total

    if tables is None:
        tables = pipeline.open_tables()  # as they are (loaded now): a page changes nothing
    if tables is None:
        return {}, []
    data, quarantine = tables
    counts: dict = {}
    for table, column in ((data, "rows"), (quarantine, "quarantined")):
        arrow = table.scan(selected_fields=("kafka_topic", "kafka_partition")).to_arrow()
        for row in arrow.group_by(["kafka_topic", "kafka_partition"]).aggregate([([], "count_all")]).to_pylist():
            tp = TopicPartition(row["kafka_topic"], row["kafka_partition"])
            counts.setdefault(tp, {"committed": 0, "rows": 0, "quarantined": 0})[column] = row["count_all"]
    for tp, ranges in by_partition(read_ledger(data).committed).items():
        counts.setdefault(tp, {"committed": 0, "rows": 0, "quarantined": 0})["committed"] = total(ranges)
    if limit <= 0:
        return dict(sorted(counts.items())), []
    bad = quarantine.scan().to_arrow()
    if bad.num_rows > limit:
        bad = bad.take(pc.select_k_unstable(bad, k=limit, sort_keys=[("kafka_offset", "descending")]))
    records = sorted(bad.to_pylist(), key=lambda r: (-r["kafka_offset"], r["kafka_partition"]))
    return dict(sorted(counts.items())), records


def _preview(value: bytes | None, size: int = 120) -> str:
    if value is None:
        return "(null)"
    text = value[:size].decode("utf-8", "backslashreplace")
    return text + (" …" if len(value) > size else "")
