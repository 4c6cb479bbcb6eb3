"""The Tailfill pages served by Airflow's API server (a FastAPI app mounted at ``/tailfill``).

Every page is addressed by what the Airflow UI knows — DAG id, DAG run id, map index — and asks
Airflow's auth manager whether the user may read that DAG (the UI's session cookie is enough):

- ``/tailfill/run/<dag>/<run>``: every lane of a run, live, the verdict and the links to each lane's
  pages, the Data Docs and the quarantine page (a tab of the DAG run page);
- ``/tailfill/batches/<dag>/<run>/<map index>``: one lane's progress and batch reports (a tab of
  the task instance page, and an extra link of the ingest task); on a backfill's other tasks the
  run's lanes, on the maintenance task the pipeline's offsets;
- ``/tailfill/report/<dag>/<run>/<map index>``: the lane's completeness report (its Data Docs link
  turned into the plugin's);
- ``/tailfill/docs/<dag>/<path>``: the pipeline's Great Expectations Data Docs;
- ``/tailfill/output/<dag>/<run>/<map index>``: the ``spark-submit`` output of the latest try;
- ``/tailfill/pipeline/<dag>``: the pipeline's live offsets (earliest, cutover, committed, lag).

Pages are plain HTML with a refresh while a run is going; nothing here changes any state.
"""

from __future__ import annotations

import html
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse

from tailfill.pipeline.handle import Pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.redact import redact_text
from tailfill.run.runtime import log_dir
from tailfill.settings import settings
from tailfill.state.store import StateStore, read_lane, run_exists, run_reports
from tailfill.values.freshness import Freshness
from tailfill_airflow.naming import BACKFILL, MAINTENANCE, split_dag_id, tailfill_run_id
from tailfill_airflow.progress import progress

if TYPE_CHECKING:
    from tailfill.proof.result import ValidationResult

MAX_LANES = 1024
STYLE = """<style>body{font:14px system-ui,sans-serif;margin:16px;color:#222}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}td.l{text-align:left}
.bar{background:#eee;width:240px;height:12px;display:inline-block}.bar i{display:block;height:12px;background:#4c9}
.bad{color:#b00}.good{color:#1a7f37}.muted{color:#777}</style>"""


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


def lane_run_id(pipeline: str, kind: str, run_id: str, map_index: str | int) -> str:
    index = map_index_of(str(map_index))
    return tailfill_run_id(pipeline, kind, run_id, index if kind == BACKFILL and index >= 0 else None)


def lane_progress(store: StateStore, tf_run: str) -> dict:
    """A lane's progress as its task saw it last, recomputed from its batch reports now."""
    lane = read_lane(store, tf_run)
    reports = run_reports(store, tf_run)
    state = (lane.state if lane else None) or ("running" if lane else "not started")
    ended = lane.ended_at if lane else None
    started = lane.started_at if lane and lane.started_at is not None else time.time()
    out = progress(reports, lane.planned if lane else None, started, now=ended or time.time(), state=state).asdict()
    return {"label": (lane.label if lane else None) or tf_run, "run_id": tf_run,
            "try_number": lane.try_number if lane else None,
            "cause": redact_text(lane.cause) if lane and lane.cause else None, **out}


def _page(title: str, body: str, refresh: bool = False) -> HTMLResponse:
    meta = '<meta http-equiv="refresh" content="5">' if refresh else ""
    return HTMLResponse(f"<!doctype html><html><head><meta charset=utf-8>{meta}<title>{html.escape(title)}</title>"
                        f"{STYLE}</head><body><h2>{html.escape(title)}</h2>{body}</body></html>")


def _bar(p: dict) -> str:
    pct = p["percent"] if p["percent"] is not None else (100 if p["state"] == "finished" else 0)
    return f'<span class="bar" title="{pct}%"><i style="width:{min(pct, 100)}%"></i></span>'


def _lane_rows(lanes: list[dict], freshness: bool = True) -> str:
    """A table of lanes; ``freshness`` only for the tail (for history it says how old the history is)."""
    head = ("<tr><th>lane</th><th>state</th><th>progress</th><th>offsets</th><th>rows/s</th><th>ETA</th>"
            "<th>batches</th>" + ("<th>freshness</th>" if freshness else "") + "</tr>")
    rows = []
    for p in lanes:
        fresh = str(Freshness.from_dict(p["freshness"])) if p.get("freshness") else ""
        planned = f"/{p['offsets_planned']:,}" if p["offsets_planned"] else ""
        cls = ' class="bad"' if p["state"] == "failed" else ""
        state = p["state"] + (f", try {p['try_number']}" if p.get("try_number") else "")
        rows.append(f"<tr><td class=l>{html.escape(p['label'])}</td><td{cls}>{html.escape(state)}</td>"
                    f"<td class=l>{_bar(p)} {p['percent'] if p['percent'] is not None else '-'}%</td>"
                    f"<td>{p['offsets_done']:,}{planned}</td><td>{p['rows_per_s']:,.0f}</td>"
                    f"<td>{p['eta_s'] if p['eta_s'] is not None else '-'}</td><td>{p['batches']}</td>"
                    + (f"<td>{html.escape(fresh) or '-'}</td>" if freshness else "") + "</tr>")
        if p.get("cause"):
            rows.append(f'<tr><td colspan=8 class="l bad">{html.escape(p["cause"])}</td></tr>')
    return f"<table>{head}{''.join(rows)}</table>"


@app.get("/run/{dag_id}/{run_id}", response_class=HTMLResponse, dependencies=[_authorized()])
def run_page(dag_id: str, run_id: str) -> HTMLResponse:
    pipeline, kind = pipeline_of(dag_id)
    lanes = []
    for index in range(MAX_LANES if kind == BACKFILL else 1):
        tf_run = lane_run_id(pipeline.name, kind, run_id, index)
        if not run_exists(pipeline.state, tf_run):
            break
        lanes.append(lane_progress(pipeline.state, tf_run))
    links = run_links(dag_id, run_id, [p["label"] for p in lanes] if kind == BACKFILL else [])
    if not lanes:
        return _page(f"{dag_id} · {run_id}", "<p>No lane has started yet.</p>" + links, refresh=True)
    from tailfill.proof.reports import read_result

    done = sum(p["offsets_done"] for p in lanes)
    planned = sum(p["offsets_planned"] or 0 for p in lanes)
    quarantined = sum(p["quarantined"] for p in lanes)
    stored = sum(p["rows"] for p in lanes) - quarantined
    cls, text = verdict([read_result(pipeline, p["run_id"]) for p in lanes])
    summary = (f'<p class="{cls}"><b>{html.escape(text)}</b></p>'
               f"<p><b>{done:,}</b>{f' of {planned:,}' if planned else ''} offsets: {stored:,} rows + "
               f"{quarantined:,} quarantined in {len(lanes)} lane(s); "
               f"{sum(p['rows_per_s'] for p in lanes):,.0f} rows/s together.</p>")
    running = any(p["state"] == "running" for p in lanes)
    return _page(f"{dag_id} · {run_id}", summary + _lane_rows(lanes, freshness=kind != BACKFILL) + links,
                 refresh=running)


def run_links(dag_id: str, run_id: str, labels: list[str]) -> str:
    """The run's links: each lane's report, progress and job output (``labels``: a backfill's lanes in
    map index order; none: the run's one Spark task), then the pipeline's Data Docs, quarantine and offsets."""
    dag, run = quote(dag_id), quote(run_id, safe="")

    def a(path: str, text: str) -> str:
        # relative to /tailfill/run/<dag>/<run>: right under any base URL path Airflow is served at
        return f'<a href="../../{path}" target="_blank" rel="noopener">{html.escape(text)}</a>'

    def lane(index: int) -> str:
        return " · ".join(a(f"{page}/{dag}/{run}/{index}", text) for page, text in
                          (("report", "completeness report"), ("batches", "progress and batch reports"),
                           ("output", "Spark job output")))

    per_lane = ("".join(f"<li>{html.escape(label)}: {lane(i)}</li>" for i, label in enumerate(labels))
                if labels else f"<li>{lane(-1)}</li>")
    pipeline = " · ".join((a(f"docs/{dag}/index.html", "Data Docs"),
                           a(f"quarantine/{dag}", "quarantined records and counts per partition"),
                           a(f"pipeline/{dag}", "live offsets")))
    return f'<h3>Links</h3><ul class="links">{per_lane}<li>{pipeline}</li></ul>'


def verdict(results: list[ValidationResult | None]) -> tuple[str, str]:
    """The run's verdict at a glance from its lanes' validations: (css class, text)."""
    failed = [r for r in results if r is not None and not r.success]
    if failed:
        problems = "; ".join(p for r in failed for p in r.problems[:3])
        return "bad", f"INCOMPLETE ({len(failed)} of {len(results)} lane(s)): {problems}"
    waiting = sum(r is None for r in results)
    if waiting:
        return "muted", f"not validated yet: {waiting} of {len(results)} lane(s) waiting for their validation"
    checked = sum(r.offsets_checked for r in results if r is not None)
    return "good", f"COMPLETE: every one of {checked:,} offsets landed exactly once ({len(results)} lane(s) validated)"


@app.get("/batches/{dag_id}/{run_id}/{map_index}", response_class=HTMLResponse, dependencies=[_authorized()])
def batches_page(dag_id: str, run_id: str, map_index: str) -> HTMLResponse:
    """A lane's tab; for a task that is not a lane, what the run or the pipeline has to show."""
    pipeline, kind = pipeline_of(dag_id)
    if kind == MAINTENANCE:  # maintain runs no Spark lane: the pipeline's offsets
        return pipeline_page(dag_id)
    if kind == BACKFILL and map_index_of(map_index) < 0:  # preflight, plan, summary: every lane of the run
        return run_page(dag_id, run_id)
    tf_run = lane_run_id(pipeline.name, kind, run_id, map_index)
    p = lane_progress(pipeline.state, tf_run)
    lane = read_lane(pipeline.state, tf_run)
    head = ("<tr><th>try</th><th>batch</th><th>committed at (UTC)</th><th>offsets</th><th>rows</th>"
            "<th>quarantined</th><th>seconds</th><th>commit ms</th><th>ranges</th></tr>")
    rows = [f"<tr><td>{(lane.try_at(r.at) if lane else None) or '-'}</td><td>{r.batch_id}</td>"
            f"<td>{time.strftime('%H:%M:%S', time.gmtime(r.at))}</td><td>{r.offsets:,}</td>"
            f"<td>{r.rows:,}</td><td>{r.quarantined:,}</td><td>{r.seconds:.1f}</td><td>{r.commit_ms:.0f}</td>"
            f"<td class=l>{html.escape(', '.join(map(str, r.committed)) or 'replay: already committed')}</td></tr>"
            for r in run_reports(pipeline.state, tf_run)]
    body = (f"<p class=muted>run {html.escape(tf_run)}</p>{_lane_rows([p], freshness=kind != BACKFILL)}<h3>Batches</h3>"
            f"<table>{head}{''.join(rows) or '<tr><td colspan=9>none committed yet</td></tr>'}</table>")
    return _page(f"{p['label']} · progress", body, refresh=p["state"] == "running")


@app.get("/report/{dag_id}/{run_id}/{map_index}", response_class=HTMLResponse, dependencies=[_authorized()])
def report_page(dag_id: str, run_id: str, map_index: str) -> HTMLResponse:
    from tailfill.plumbing.warehouse import fs_path
    from tailfill.proof.reports import results_uri

    pipeline, kind = pipeline_of(dag_id)
    tf_run = lane_run_id(pipeline.name, kind, run_id, map_index)
    try:
        with pipeline.fs.open_input_stream(fs_path(f"{results_uri(pipeline.cfg)}/{tf_run}.html")) as f:
            return HTMLResponse(served_docs_links(f.read().decode(), dag_id))
    except (FileNotFoundError, OSError):
        return _page(f"{tf_run}: not validated yet",
                     "<p>The completeness report appears here once the run's validation task has run.</p>",
                     refresh=True)


_LOCAL_DOCS = re.compile(r'href="file://[^"]*/local_site/([^"]*)"')


def served_docs_links(report: str, dag_id: str) -> str:
    """A completeness report with its ``file://`` link to the Data Docs turned into the plugin's."""
    # relative to /tailfill/report/<dag>/<run>/<map index>
    return _LOCAL_DOCS.sub(lambda m: f'href="../../../docs/{quote(dag_id)}/{m[1]}"', report)


@app.get("/docs/{dag_id}/{path:path}", dependencies=[_authorized()])
def data_docs(dag_id: str, path: str) -> FileResponse:
    from tailfill.proof.reports import gx_root

    cfg = pipeline_of(dag_id)[0].cfg
    site = (gx_root(cfg) / "gx" / "uncommitted" / "data_docs" / "local_site").resolve()
    file = (site / (path or "index.html")).resolve()
    if not file.is_relative_to(site) or not file.is_file():
        raise HTTPException(404, f"no Data Docs page {path!r} for {cfg.name} (validate a run first)")
    return FileResponse(file)


@app.get("/output/{dag_id}/{run_id}/{map_index}", response_class=PlainTextResponse, dependencies=[_authorized()])
def job_output(dag_id: str, run_id: str, map_index: str) -> PlainTextResponse:
    pipeline, kind = pipeline_of(dag_id)
    folder = log_dir(pipeline.name, lane_run_id(pipeline.name, kind, run_id, map_index))
    tries = sorted(folder.glob("spark-submit-try*.log"), key=lambda f: int(f.stem.removeprefix("spark-submit-try")))
    if not tries:
        raise HTTPException(404, f"no spark-submit output in {folder}")
    return PlainTextResponse(f"# {tries[-1]}\n" + redact_text(Path(tries[-1]).read_text(errors="replace")))


@app.get("/pipeline/{dag_id}", response_class=HTMLResponse, dependencies=[_authorized()])
def pipeline_page(dag_id: str) -> HTMLResponse:
    from tailfill_airflow.live import live_context

    pipeline, _ = pipeline_of(dag_id)
    cfg = pipeline.cfg
    with pipeline:
        ctx = live_context(pipeline)
    return _page(f"{cfg.name}: {cfg.source.topic} → {cfg.target.namespace}.{cfg.target.table}",
                 f"<pre>{html.escape(ctx['text'])}</pre>")


QUARANTINE_ROWS = 500  # the most recent quarantined records a page lists


@app.get("/quarantine/{dag_id}", response_class=HTMLResponse, dependencies=[_authorized()])
def quarantine_page(dag_id: str) -> HTMLResponse:
    """The table's counts per partition, and the quarantined records: offsets, error, run, raw value."""
    pipeline, _ = pipeline_of(dag_id)
    cfg = pipeline.cfg
    with pipeline:
        counts, records = table_contents(pipeline, QUARANTINE_ROWS)
    head = "<tr><th>partition</th><th>committed offsets</th><th>rows</th><th>quarantined</th></tr>"
    rows = "".join(f"<tr><td class=l>{html.escape(str(tp))}</td><td>{c['committed']:,}</td><td>{c['rows']:,}</td>"
                   f"<td>{c['quarantined']:,}</td></tr>" for tp, c in counts.items())
    listed = "".join(
        f"<tr><td class=l>{html.escape(r['kafka_topic'])}[{r['kafka_partition']}]</td><td>{r['kafka_offset']:,}</td>"
        f"<td class=l>{html.escape(redact_text(r['error'] or ''))}</td>"
        f"<td class=l>{html.escape(r['run_id'] or '')}</td>"
        f"<td class=l><code>{html.escape(_preview(r['kafka_value']))}</code></td></tr>" for r in records)
    total_bad = sum(c["quarantined"] for c in counts.values())
    body = (f"<h3>Counts per partition</h3><table>{head}{rows}</table>"
            f"<h3>Quarantined records ({total_bad:,}; the {min(total_bad, QUARANTINE_ROWS):,} latest offsets "
            f"listed)</h3><table><tr><th>partition</th><th>offset</th><th>error</th><th>run</th><th>raw value</th>"
            f"</tr>{listed or '<tr><td colspan=5>none</td></tr>'}</table>")
    return _page(f"{cfg.name} · {cfg.target.namespace}.{cfg.target.table} · quarantine", body)


def table_contents(pipeline: Pipeline, limit: int) -> tuple[dict, list[dict]]:
    """Per partition: offsets the ledger committed, rows and quarantined rows stored; and the ``limit``
    quarantined records with the highest offsets, newest first (nothing while the tables were never made)."""
    import pyarrow.compute as pc

    from tailfill.lake.ledger import read_ledger
    from tailfill.offsets import TopicPartition, by_partition, total

    tables = pipeline.open_tables()  # as they are: a page changes nothing
    if tables is None:
        return {}, []
    data, quarantine = tables
    counts: dict = {}
    for table, column in ((data, "rows"), (quarantine, "quarantined")):
        table.refresh()
        arrow = table.scan(selected_fields=("kafka_topic", "kafka_partition")).to_arrow()
        for row in arrow.group_by(["kafka_topic", "kafka_partition"]).aggregate([([], "count_all")]).to_pylist():
            tp = TopicPartition(row["kafka_topic"], row["kafka_partition"])
            counts.setdefault(tp, {"committed": 0, "rows": 0, "quarantined": 0})[column] = row["count_all"]
    for tp, ranges in by_partition(read_ledger(data).committed).items():
        counts.setdefault(tp, {"committed": 0, "rows": 0, "quarantined": 0})["committed"] = total(ranges)
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
