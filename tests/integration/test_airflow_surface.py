"""What the Tailfill tab and pages say of runs that never start a lane, on a real local Airflow.

Three pipelines, none of which starts Spark: ``gone`` reads a broker that is not there (its preflight
fails), ``missing`` a topic the broker does not have, ``quiet`` an empty topic (its backfill and tail
have nothing to do; its upkeep finds empty tables). Each run's tab must name what happened — the
failed task and its cause, "nothing to do", what the upkeep did — link only pages that exist, and the
live-offsets page must answer a broken source with its cause in the page, never a bare 500. The pages
are read through the REST token and in headless Chromium, inside the Airflow UI's tab.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest
import yaml
from airflow_server import AirflowError, AirflowServer, text_of
from airflow_ui import (
    frame_refresh,
    login,
    open_trigger_form,
    set_field,
    submit_trigger_form,
    wait_for_tab,
    wait_for_text,
)
from alert_hook import alerts
from helpers import wait_until

from tailfill.source.topics import ensure_topic

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "pipelines" / "demo.yaml"
GONE, MISSING, QUIET, STRICT, HANDOFF = "gone", "missing", "quiet", "strict", "handoff"
RUNS: dict[str, str] = {}  # run ids the later tests look at


@pytest.fixture(scope="module")
def surface_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("airflow-surface")


@pytest.fixture(scope="module")
def pipelines(broker, surface_dir, refused_port) -> dict[str, dict]:
    """The pipelines' YAML (the demo's, unscheduled, a 1 s freshness objective), in one folder; ``strict`` keeps the
    default for a missed objective (fail), the others warn; ``handoff`` keeps the demo's schedule (its DAG stays
    paused until its test unpauses it)."""
    folder = surface_dir / "pipelines"
    folder.mkdir()
    dead = f"127.0.0.1:{refused_port}"  # nothing listens there
    quiet_topic, strict_topic = f"t-quiet-{uuid.uuid4().hex[:8]}", f"t-strict-{uuid.uuid4().hex[:8]}"
    handoff_topic = f"t-handoff-{uuid.uuid4().hex[:8]}"
    for topic in (quiet_topic, strict_topic, handoff_topic):
        ensure_topic(broker.bootstrap_servers, topic, 4)
    out = {}
    for name, servers, topic in ((GONE, dead, "t-gone"), (MISSING, broker.bootstrap_servers,
                                                          f"t-missing-{uuid.uuid4().hex[:8]}"),
                                 (QUIET, broker.bootstrap_servers, quiet_topic),
                                 (STRICT, broker.bootstrap_servers, strict_topic),
                                 (HANDOFF, broker.bootstrap_servers, handoff_topic)):
        data = yaml.safe_load(DEMO.read_text())
        data["name"] = name
        data["source"]["bootstrap_servers"] = servers
        data["source"]["topic"] = topic
        data["tail"]["schedule"] = "*/10 * * * *" if name == HANDOFF else None
        data["tail"]["freshness_seconds"] = 1  # a tail run that starts Spark misses it: the warning is seen
        if name in (STRICT, HANDOFF):
            data["target"]["table"] = f"{name}_events"  # its tail writes rows: a table of its own
        if name != STRICT:
            data["tail"]["on_missed_objective"] = "warn"  # the run succeeds with the warning (the default fails it)
        data["maintenance"]["schedule"] = None
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(data))
        out[name] = data
    return out


@pytest.fixture(scope="module")
def airflow(pipelines, surface_dir, postgres):
    database = f"airflow_{uuid.uuid4().hex[:8]}"
    postgres.create_databases(database)
    env = dict(os.environ, TAILFILL_HOME=str(surface_dir / "home"), TAILFILL_PIPELINES=str(surface_dir / "pipelines"),
               TAILFILL_AIRFLOW_DB=postgres.url(database), TAILFILL_ON_FAILURE="alert_hook:record",
               TAILFILL_TEST_ALERTS=str(surface_dir / "alerts.jsonl"),
               AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps({"type": "file", "append": True,
                                                           "log_file_path": str(surface_dir / "lineage.jsonl")}),
               AIRFLOW__OPENLINEAGE__NAMESPACE="tailfill-tests",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO / "tests"), os.environ.get("PYTHONPATH")) if p))
    with AirflowServer(surface_dir / "airflow", env=env) as server:
        for dag_id in (f"{GONE}_backfill", f"{QUIET}_backfill", f"{QUIET}_incremental", f"{QUIET}_maintenance",
                       f"{STRICT}_incremental"):
            server.wait_for_dag(dag_id)
        yield server


def finished(airflow: AirflowServer, dag_id: str, conf: dict | None = None, timeout: float = 240) -> tuple[str, str]:
    """Trigger ``dag_id`` and wait until its run ends: ``(run id, state)``."""
    run_id = airflow.trigger_dag(dag_id, conf)
    return run_id, airflow.wait_for_end(dag_id, run_id, timeout)["state"]


def run_tab(airflow: AirflowServer, dag_id: str, run_id: str) -> str:
    """The run's Tailfill tab (``/tailfill/run/<dag>/<run>``) through the REST token; every link on it answers."""
    url = f"{airflow.url}/tailfill/run/{dag_id}/{urllib.parse.quote(run_id, safe='')}"
    status, body = airflow.get_text(url)
    assert status == 200, (status, body[:2000])
    assert "laneNone" not in body and "No lane has started yet." not in body, body
    for href in re.findall(r'href="([^"]+)"', body):
        target = urllib.parse.urljoin(url, href)
        if "/tailfill/" in target:  # the plugin's pages (the Airflow UI's are a single-page app)
            code, text = airflow.get_text(target)
            assert code not in (404, 500), (target, code, text[:500])
    return body


def test_a_failed_preflight_names_its_cause_on_the_run_tab(airflow, pipelines, surface_dir, browser, shot):
    dag = f"{GONE}_backfill"
    run_id, state = finished(airflow, dag)
    assert state == "failed"
    states = {t["task_id"]: (t["state"], t["try_number"]) for t in airflow.task_instances(dag, run_id)}
    assert states["preflight"] == ("failed", 1), states  # the broker's absence is not retried
    text = text_of(run_tab(airflow, dag, run_id))
    servers = pipelines[GONE]["source"]["bootstrap_servers"]
    assert f"FAILED at preflight (try 1): preflight of {GONE} (backfill) failed:" in text, text
    assert servers in text and "Failed tries and warnings" in text, text
    assert "completeness report" not in text and "Spark job output" not in text, text  # no lane: no lane links
    failure = airflow.xcom(dag, run_id, "preflight", key="failure")  # for automation: cause and fix as data
    assert failure["what"] == f"preflight of {GONE} (backfill)" and servers in failure["cause"], failure
    assert failure["retryable"] is False and failure["fix"], failure
    assert f"fix: {failure['fix']}" in text, text  # the tab shows the same fix
    def note() -> str | None:  # written by the scheduler's listener just after the run failed
        return next(t for t in airflow.task_instances(dag, run_id) if t["task_id"] == "preflight")["note"]

    wait_until(lambda: note() is not None, "the failed task's note", timeout=60)
    assert servers in note() and f"fix: {failure['fix']}" in note(), note()  # and the task's note, in the grid
    [alert] = [a for a in alerts(surface_dir / "alerts.jsonl") if a["dag_id"] == dag and a["run_id"] == run_id]
    assert alert["task_id"] == "preflight" and servers in alert["error"], alert  # the alerting hook was called

    login(browser, airflow)
    browser.get(f"{airflow.url}/dags/{dag}/runs/{run_id}/plugin/tailfill_run")
    wait_for_tab(browser, shot, "failed-preflight-run-tab", "FAILED at preflight (try 1)", servers)
    browser.get(f"{airflow.url}/dags/{dag}/runs/{run_id}/tasks/preflight/plugin/tailfill_lane")
    wait_for_tab(browser, shot, "failed-preflight-task-tab", "FAILED at preflight (try 1)")


@pytest.mark.parametrize("name, kind, cause", [(GONE, "BrokerUnresponsive:", "cannot reach Kafka at"),
                                              (MISSING, "SourceError:", "not found on")])
def test_the_live_offsets_page_answers_a_broken_source_with_its_cause(airflow, pipelines, name, kind, cause, browser,
                                                                        shot):
    url = f"{airflow.url}/tailfill/pipeline/{name}_backfill"
    status, body = airflow.get_text(url, timeout=60)
    text = text_of(body)
    assert status == 503, (status, text[:1000])
    assert "the live offsets cannot be read" in text and kind in text and cause in text, text
    assert pipelines[name]["source"]["topic"] in text and "Fix: check that the brokers" in text, text
    assert "Internal Server Error" not in text, text

    login(browser, airflow)
    browser.get(url)
    wait_for_text(browser, shot, f"live-offsets-{name}", "the live offsets cannot be read", cause)


def test_nothing_to_do_runs_say_so_and_start_no_spark(airflow, pipelines, browser, shot):
    backfill, incremental = f"{QUIET}_backfill", f"{QUIET}_incremental"
    run_id, state = finished(airflow, backfill)
    assert state == "success", airflow.describe_run(backfill, run_id)
    states = {t["task_id"]: t["state"] for t in airflow.task_instances(backfill, run_id)}
    assert states["ingest_slice"] == "skipped", states
    text = text_of(run_tab(airflow, backfill, run_id))
    assert "Nothing to do: every offset of the requested range is committed already" in text, text

    tail_id, state = finished(airflow, incremental)
    assert state == "success", airflow.describe_run(incremental, tail_id)
    text = text_of(run_tab(airflow, incremental, tail_id))
    assert "Nothing new since the committed position: no Spark job was started" in text, text

    login(browser, airflow)
    browser.get(f"{airflow.url}/dags/{backfill}/runs/{run_id}/plugin/tailfill_run")
    wait_for_tab(browser, shot, "nothing-to-backfill", "Nothing to do", "live offsets")
    browser.get(f"{airflow.url}/dags/{incremental}/runs/{tail_id}/tasks/tune/plugin/tailfill_lane")
    wait_for_tab(browser, shot, "nothing-to-tail", "Nothing new since the committed position")


def test_a_maintenance_run_shows_what_it_did(airflow, pipelines, browser, shot):
    dag = f"{QUIET}_maintenance"
    run_id, state = finished(airflow, dag)
    assert state == "success", airflow.describe_run(dag, run_id)
    text = text_of(run_tab(airflow, dag, run_id))
    assert "Maintenance done" in text, text
    assert re.search(r"compacted \d+ files into \d+", text) or "never made" in text, text

    login(browser, airflow)
    browser.get(f"{airflow.url}/dags/{dag}/runs/{run_id}/plugin/tailfill_run")
    wait_for_tab(browser, shot, "maintenance-run-tab", "Maintenance done")


def test_a_restart_and_a_missed_objective_of_the_tail_show_on_its_tabs(airflow, pipelines, surface_dir, browser,
                                                                       shot, arm_fault):
    """The tail's first batch fails once (an injected fault) and its query starts again from the checkpoint:
    the run tab and the tail's tab count the restart and name its cause; the try's output is linked. Its
    batches miss the 1 s freshness objective: the run succeeds (``on_missed_objective: warn``) with the
    warning on its tab, in the report's XCom and sent to the alerting hook by the ``objective`` task, naming the
    restart as the cause."""
    from tailfill.dev.sample import produce_sample

    dag = f"{QUIET}_incremental"
    produce_sample(pipelines[QUIET]["source"]["bootstrap_servers"], pipelines[QUIET]["source"]["topic"], 300, 4)
    arm_fault("before-commit", 1)
    run_id, state = finished(airflow, dag, timeout=600)
    assert state == "success", airflow.describe_run(dag, run_id)
    RUNS["tail"] = run_id
    text = text_of(run_tab(airflow, dag, run_id))
    # The injected fault is one restart; a machine under load may add one of its own (a Python worker slow to start).
    counted = re.search(r"finished, try 1, (\d+) restarts?", text)
    assert counted and int(counted.group(1)) >= 1 and "last restart (try 1," in text, text

    url = f"{airflow.url}/tailfill/batches/{dag}/{urllib.parse.quote(run_id, safe='')}/-1"
    status, body = airflow.get_text(url)
    assert status == 200 and "Restarts of the job's queries" in body and "InjectedFault" in body, body[:3000]
    [output] = re.findall(r'href="([^"]+\?try=1)"', body)
    status, out = airflow.get_text(urllib.parse.urljoin(url, output))
    assert status == 200 and "spark-submit-try1.log" in out.splitlines()[0] and "TAILFILL_RESTART" in out, out[:500]

    report = airflow.xcom(dag, run_id, "report")
    topic = pipelines[QUIET]["source"]["topic"]
    assert (report["verdict"], report["offsets"]) == ("COMPLETE", 300) and report["restarts"] >= 1, report
    assert report["restarts"] == int(counted.group(1)), (report, text)
    assert sum(end - start for spans in report["ranges"][topic].values() for start, end in spans) == 300, report
    objective = report["objective"]
    assert objective["met"] is False and objective["missed"] >= 1 and objective["objective_seconds"] == 1, objective
    assert "freshness objective p95 ≤ 1s MISSED by" in text and "warning" in text, text
    [alert] = [a for a in alerts(surface_dir / "alerts.jsonl") if a["run_id"] == run_id]
    assert alert["task_id"] == "objective" and alert["warning"] and "MISSED" in alert["error"], alert
    assert "outage: the job restarted its query" in alert["error"], alert

    validate = next(t for t in airflow.task_instances(dag, run_id) if t["task_id"] == "validate")
    path = (f"/api/v2/dags/{dag}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/validate/logs/"
            f"{validate['try_number']}")
    entries = airflow.request("GET", path, params={"map_index": -1, "full_content": "true"})["content"]
    chatter = [e for e in entries if isinstance(e, dict) and str(e.get("logger", "")).startswith("great_expectations")
               and e.get("level") == "info"]
    assert not chatter, f"{len(chatter)} INFO lines of Great Expectations in the validate log: {chatter[:3]}"

    status, body = airflow.get_text(f"{airflow.url}/tailfill/table/{QUIET}_backfill")  # the table preview
    text = text_of(body)
    assert status == 200 and "First rows (50 of 300)" in text and "event_id" in text and topic in text, text[:2000]

    login(browser, airflow)
    browser.get(f"{airflow.url}/tailfill/table/{QUIET}_backfill")
    wait_for_text(browser, shot, "table-preview", "Counts per partition", "First rows (50 of 300)")
    browser.get(f"{airflow.url}/dags/{dag}/runs/{run_id}/tasks/tail/plugin/tailfill_lane")
    wait_for_tab(browser, shot, "tail-restart", "restart", "Restarts of the job's queries", "InjectedFault")
    browser.get(f"{airflow.url}/dags/{dag}/runs/{run_id}/plugin/tailfill_run")
    wait_for_tab(browser, shot, "missed-objective", "MISSED by", "Failed tries and warnings")


def test_unpause_on_trigger_leaves_the_work_to_the_run_asked_for(airflow, pipelines, surface_dir):
    """A paused incremental DAG triggered by hand, then unpaused (the form's *unpause* does both at once): unpausing
    makes a scheduled run, which Airflow starts first. It hands the waiting offsets over, and its tab names the run
    triggered by hand, which ingests and validates every one of them."""
    from tailfill.dev.sample import produce_sample
    from tailfill.pipeline.handle import open_pipeline
    from tailfill.pipeline.load import load_pipeline
    from tailfill.run.planner import TailRequest, plan_tail

    dag = f"{HANDOFF}_incremental"
    wait_until(lambda: _parsed(airflow, dag), f"{dag} parsed")
    assert airflow.dag(dag)["is_paused"], "a scheduled DAG comes up paused"
    with pytest.MonkeyPatch.context() as mp:  # the cutover, before the records: they are the tail's
        mp.setenv("TAILFILL_HOME", str(surface_dir / "home"))
        with open_pipeline(load_pipeline(surface_dir / "pipelines" / f"{HANDOFF}.yaml")) as pipeline:
            plan_tail(pipeline, TailRequest(once=True), "handoff-cutover")
    produce_sample(pipelines[HANDOFF]["source"]["bootstrap_servers"], pipelines[HANDOFF]["source"]["topic"], 200, 4)

    manual = airflow.trigger_dag(dag)
    airflow.request("PATCH", f"/api/v2/dags/{dag}", {"is_paused": False})
    try:
        wait_until(lambda: any(r["run_type"] == "scheduled" for r in airflow.dag_runs(dag)),
                   "the scheduled run unpausing makes", timeout=60)
        [scheduled] = [r["dag_run_id"] for r in airflow.dag_runs(dag) if r["run_type"] == "scheduled"]
        ends = {run: airflow.wait_for_end(dag, run, timeout=600) for run in (scheduled, manual)}
    finally:
        airflow.request("PATCH", f"/api/v2/dags/{dag}", {"is_paused": True})
    assert {run: end["state"] for run, end in ends.items()} == {scheduled: "success", manual: "success"}, \
        [airflow.describe_run(dag, run) for run in ends]
    assert ends[scheduled]["start_date"] < ends[manual]["start_date"], ends  # the order that starved the manual run

    states = {t["task_id"]: t["state"] for t in airflow.task_instances(dag, scheduled)}
    assert (states["tune"], states["tail"], states["validate"]) == ("success", "skipped", "skipped"), states
    handed = airflow.xcom(dag, scheduled, "tune", key="handed_over")
    assert "a run triggered by hand waits behind this scheduled run" in handed["line"], handed
    text = text_of(run_tab(airflow, dag, scheduled))
    assert f"Handed over to run {manual}: that run, triggered by hand, ingests the waiting offsets" in text, text
    assert "Nothing new" not in text, text

    report = airflow.xcom(dag, manual, "report")  # the run asked for did the work
    assert (report["verdict"], report["offsets"]) == ("COMPLETE", 200), report
    assert "Nothing new" not in text_of(run_tab(airflow, dag, manual))


def _parsed(airflow: AirflowServer, dag_id: str) -> bool:
    try:
        airflow.dag(dag_id)
    except AirflowError as exc:
        if "-> 404" in str(exc):
            return False
        raise
    return True


def rest_example() -> str:
    """The REST example of docs/airflow.md, as its readers copy it."""
    text = (REPO / "docs" / "airflow.md").read_text()
    block = text.split("<!-- rest-example:", 1)[1]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.parametrize("name, expected", [
    (QUIET, r"^success: NOTHING_TO_DO, 0 offsets, ranges \{\}$"),
    (GONE, r"^failed at preflight: preflight of gone \(backfill\) failed: cannot reach Kafka at .* \(fix: fix what "
           r"the failed check names .*\)$"),
])
def test_the_documented_rest_example_reads_the_verdict_or_the_failure(airflow, pipelines, tmp_path, name, expected):
    import subprocess
    import sys

    from tailfill_airflow.local import PASSWORD, USER

    script = tmp_path / "rest_example.py"
    script.write_text(rest_example())
    env = dict(os.environ, AIRFLOW_URL=airflow.url, DAG=f"{name}_backfill", AIRFLOW_USER=USER,
               AIRFLOW_PASSWORD=PASSWORD)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.match(expected, done.stdout.strip()), done.stdout


def test_openlineage_events_name_the_topic_and_the_table_with_schema_and_rows(airflow, pipelines, surface_dir):
    """The tail run's ingest and validate tasks each attribute the Kafka topic (input, named by the broker's address)
    and the Iceberg table (output, with its schema and the 300 rows) to their run, on a RUNNING event and on the
    task's COMPLETE event, through the OpenLineage provider's file transport."""
    assert "tail" in RUNS, "needs the tail run of test_a_restart_and_a_missed_objective_of_the_tail_show_on_its_tabs"
    path = surface_dir / "lineage.jsonl"
    deadline = time.monotonic() + 60  # the provider emits from a worker of its own
    while True:
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
        mine: dict[tuple[str, str], list[dict]] = {}
        for e in events:
            job = e.get("job", {}).get("name", "")
            if job.startswith(f"{QUIET}_incremental.") and e.get("outputs"):
                mine.setdefault((job.removeprefix(f"{QUIET}_incremental."), e["eventType"]), []).append(e)
        wanted = {(task, kind) for task in ("tail", "validate") for kind in ("RUNNING", "COMPLETE")}
        if wanted <= set(mine) or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert wanted <= set(mine), sorted({(e.get("job", {}).get("name"), e.get("eventType")) for e in events})
    source = pipelines[QUIET]["source"]
    for task, kind in sorted(wanted):
        event = mine[task, kind][-1]  # the latest run of the task: this one
        [source_ds] = event["inputs"]
        assert (source_ds["namespace"], source_ds["name"]) == (f"kafka://{source['bootstrap_servers']}",
                                                              source["topic"]), event
        [table] = event["outputs"]
        assert (table["namespace"], table["name"]) == ("iceberg://tailfill", "tailfill.demo_events"), table
        fields = {f["name"]: f["type"] for f in table["facets"]["schema"]["fields"]}
        assert {"event_id", "user_id", "kafka_offset"} <= set(fields) and fields["event_id"] == "string", fields
        assert table["outputFacets"]["outputStatistics"]["rowCount"] == 300, table
    # The topic is an asset too, named by the broker's address, read by the DAGs' ingest tasks.
    uri = f"kafka://{source['bootstrap_servers']}/{source['topic']}"
    [asset] = [a for a in airflow.request("GET", "/api/v2/assets", params={"uri_pattern": source["topic"]})["assets"]
               if a["uri"] == uri]
    assert {(t["dag_id"], t["task_id"]) for t in asset["consuming_tasks"]} >= {
        (f"{QUIET}_incremental", "tail"), (f"{QUIET}_backfill", "ingest_slice")}, asset


def test_a_missed_objective_fails_the_run_at_its_objective_task_after_the_report(airflow, pipelines, surface_dir):
    """The default (``tail.on_missed_objective: fail``): a tail whose batches miss the 1 s objective fails its run at
    the last task, ``objective``, after ``report`` landed; one line names the measured cause and the fix, in the
    task's failure XCom, on the run's tab and in the alert."""
    from tailfill.dev.sample import produce_sample

    dag, source = f"{STRICT}_incremental", pipelines[STRICT]["source"]
    assert finished(airflow, dag)[1] == "success"  # the first run records the cutover: nothing new, nothing missed
    produce_sample(source["bootstrap_servers"], source["topic"], 100, 4)
    run_id, state = finished(airflow, dag, timeout=600)
    states = {t["task_id"]: (t["state"], t["try_number"]) for t in airflow.task_instances(dag, run_id)}
    assert state == "failed" and states["objective"] == ("failed", 1), airflow.describe_run(dag, run_id)
    assert states["report"][0] == "success" and states["validate"][0] == "success", states
    report = airflow.xcom(dag, run_id, "report")
    assert report["verdict"] == "COMPLETE" and report["objective"]["met"] is False, report
    line = report["objective"]["summary"]
    assert re.match(r"freshness objective p95 ≤ 1s MISSED by \d+ of \d+ batch\(es\) \(worst batch p95 [\d,.]+s\): "
                    r"(outage|slow batch|backlog|schedule): .* \(fix: .+\)$", line), line
    failure = airflow.xcom(dag, run_id, "objective", key="failure")
    assert (failure["cause"], failure["error_class"], failure["retryable"]) == (line, "ObjectiveMissed", False)
    assert line in text_of(run_tab(airflow, dag, run_id))
    [alert] = [a for a in alerts(surface_dir / "alerts.jsonl") if a["run_id"] == run_id]
    assert (alert["task_id"], alert["error"]) == ("objective", line) and not alert.get("warning"), alert


def test_a_bad_field_is_refused_at_the_form_and_the_rest_api_before_a_run_exists(airflow, pipelines, browser, shot):
    """A From that is neither `earliest` nor offsets JSON, or Slices 0: Airflow refuses the trigger with the field and
    why (HTTP 400 from the REST API, an error in the form) and no run is made."""
    dag = f"{QUIET}_backfill"
    before = {r["dag_run_id"] for r in airflow.dag_runs(dag)}
    for conf, said in (({"slices": 0}, "Invalid input for param slices: 0 is less than the minimum of 1"),
                       ({"from_offsets": "yesterday"}, "Invalid input for param from_offsets: "),
                       ({"to_offsets": "{not json"}, "Invalid input for param to_offsets: ")):
        with pytest.raises(AirflowError, match=r"-> 400: .*" + re.escape(said)):
            airflow.trigger_dag(dag, conf)

    login(browser, airflow)
    set_field(browser, open_trigger_form(browser, airflow, dag, "element_from_offsets"), "yesterday")
    shot("trigger-form-garbage-from")
    submit_trigger_form(browser)
    wait_for_text(browser, shot, "trigger-form-refused", "Invalid input for param from_offsets", "does not match")
    assert {r["dag_run_id"] for r in airflow.dag_runs(dag)} == before


@pytest.mark.parametrize("conf, line", [
    ({"to_offset": "cutover", "slices": 2},
     "backfill conf: unknown key 'to_offset' (did you mean 'to_offsets'?); the known keys are committed_ranges, "
     "from_offsets, max_offsets_per_second, max_parallel_slices, slices, to_offsets (fix: trigger the run again with "
     "the known keys only)"),
    ({"from_offsets": '{"t": {"0": 9}}', "to_offsets": '{"t": {"0": 1}}'},
     "backfill bounds: a start after its end: t[0] from 9 to 1 (fix: swap From and To)"),
])
def test_an_unknown_conf_key_or_from_after_to_fails_preflight_at_once_with_one_line(airflow, conf, line):
    """What Airflow's per-field check lets through: the run's first task fails on its first try, naming the key and
    the known ones (or the partition), in its failure XCom and on the run's tab; no plan, no Spark."""
    dag = f"{QUIET}_backfill"
    run_id, state = finished(airflow, dag, conf)
    assert state == "failed"
    states = {t["task_id"]: (t["state"], t["try_number"]) for t in airflow.task_instances(dag, run_id)}
    assert states["preflight"] == ("failed", 1) and states["plan"][0] == "upstream_failed", states
    failure = airflow.xcom(dag, run_id, "preflight", key="failure")
    assert (failure["cause"], failure["retryable"]) == (line, False), failure
    text = text_of(run_tab(airflow, dag, run_id))
    assert f"FAILED at preflight (try 1): preflight of {QUIET} (backfill) failed: {line}" in text, text


def test_the_verdict_refreshes_until_validated_and_each_run_adds_a_lag_point(airflow, pipelines, browser, shot,
                                                                           paused_batches):
    """The run's tab, opened once while the tail runs (its batch held on the executors until the tab has shown the
    pending verdict), goes from "not validated yet" to the verdict by itself and then sets no refresh timer.
    Records produced after the tail's job ended are behind at the end of that run (40);
    the next run takes them (0 behind): the tab and the live-offsets page list both runs with their numbers."""
    from selenium.webdriver.support.ui import WebDriverWait

    from tailfill.dev.sample import produce_sample

    dag, source = f"{QUIET}_incremental", pipelines[QUIET]["source"]
    assert finished(airflow, dag)[1] == "success"  # a first tail run records the cutover (if none is yet)
    produce_sample(source["bootstrap_servers"], source["topic"], 200, 4)
    login(browser, airflow)
    paused_batches.arm()
    try:
        first = airflow.trigger_dag(dag)
        browser.get(f"{airflow.url}/dags/{dag}/runs/{first}/plugin/tailfill_run")
        browser.execute_script("window.tailfillOpenedOnce = true")  # gone if the Airflow page itself reloads
        wait_for_tab(browser, shot, "verdict-pending", "not validated yet", timeout=420)
        pending = frame_refresh(browser, "not validated yet")
        assert pending is not None and pending[0] == "every 5s" and pending[1] == 1, pending
    finally:
        paused_batches.release()

    def states() -> dict:
        return {t["task_id"]: t["state"] for t in airflow.task_instances(dag, first)}

    WebDriverWait(browser, 600, poll_frequency=1).until(lambda _: states().get("tail") in ("success", "failed"))
    assert states()["tail"] == "success", airflow.describe_run(dag, first)
    produce_sample(source["bootstrap_servers"], source["topic"], 40, 4)  # after the job: behind at this run's end
    assert states().get("report") in (None, "none", "scheduled", "queued"), states()  # measured after the 40

    text = wait_for_tab(browser, shot, "verdict-final", "COMPLETE: every one of 200 offsets", timeout=420)
    assert "not validated yet" not in text, text
    assert frame_refresh(browser, "COMPLETE: every one of 200 offsets") == ("final", 0)  # no timer left
    assert browser.execute_script("return window.tailfillOpenedOnce === true"), "the Airflow page was reloaded"
    assert airflow.wait_for_end(dag, first, timeout=300)["state"] == "success", airflow.describe_run(dag, first)
    assert airflow.xcom(dag, first, "report")["lag"]["behind"] == 40

    second, state = finished(airflow, dag, timeout=600)
    assert state == "success", airflow.describe_run(dag, second)
    report = airflow.xcom(dag, second, "report")
    assert (report["offsets"], report["lag"]["behind"]) == (40, 0), report
    expected = {first: ("200", "40"), second: ("40", "0")}
    for body in (run_tab(airflow, dag, second), airflow.get_text(f"{airflow.url}/tailfill/pipeline/{dag}")[1]):
        rows = {run: (offsets, behind) for run, offsets, behind in re.findall(
            r"<tr class=lag-point><td class=l>([^<]+)</td><td class=l>[^<]+</td><td>([^<]+)</td>"
            r"<td class=behind>([^<]+)</td>", body)}
        assert {run: rows.get(run) for run in expected} == expected, rows
        dots = re.findall(r"<svg class=\"lag-behind\".*?</svg>", body, flags=re.S)[0]
        assert f"<title>{first}: 40 behind</title>" in dots and f"<title>{second}: 0 behind</title>" in dots, dots

    browser.get(f"{airflow.url}/dags/{dag}/runs/{second}/plugin/tailfill_run")
    wait_for_tab(browser, shot, "lag-over-time", "Lag over time", "offsets behind at run end")
