"""End to end through Airflow: the generated DAGs run on a real local Airflow (``tailfill_airflow.local``).

One Airflow per module (api-server, scheduler, dag-processor, triggerer on a free loopback port,
its own AIRFLOW_HOME, metadata in its own database on the session's Postgres, LocalExecutor), one
pipeline ``e2e`` on a fresh topic of the session broker. The backfill is triggered through the
REST API with non-default params (two lanes, which must run side by side), then the incremental
DAG tails what came after the cutover; every offset must land exactly once. A second test drives the UI in
headless Chromium: log in, open the backfill DAG's trigger form, change a param, trigger, and
look at the grid. Screenshots are kept as test artefacts under ``build/e2e-screenshots/<test>/``
(paths printed).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy
from airflow_server import FINISHED, AirflowServer, local_airflow
from airflow_ui import login, open_trigger_form, set_field, submit_trigger_form, wait_for_tab, wait_for_text
from fault_outcomes import prove
from helpers import assert_exactly_once, committed, high_watermarks, write_demo_pipeline
from processes import processes_with

from tailfill.dev.sample import produce_sample
from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.proof.reports import read_latest

pytestmark = pytest.mark.integration

NAME = "e2e"
BACKFILL, INCREMENTAL = f"{NAME}_backfill", f"{NAME}_incremental"
HISTORY, LIVE, PARTITIONS, BAD_EVERY = 4_000, 1_000, 4, 499
CATALOG_SECRET = f"e2e-catalog-{uuid.uuid4().hex[:12]}"  # the catalog URI's password
PARAMS = {"slices": 3, "max_parallel_slices": 2, "committed_ranges": "skip"}
RUNS: dict[str, str] = {}  # run ids the later tests look at


@pytest.fixture(scope="module")
def e2e_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("airflow-e2e")


@pytest.fixture(scope="module")
def pipeline(broker, e2e_dir, postgres):
    """The demo pipeline as ``e2e`` on a fresh topic holding HISTORY records, alone in its folder.

    The tail has no schedule: a scheduled incremental run would start as soon as Airflow is up
    and race the backfill for the cutover; here every run is triggered by the test. Its catalog is
    on Postgres, from ``${E2E_CATALOG_URI}``, whose password (:data:`CATALOG_SECRET`; the test
    server trusts loopback, so it is carried, not checked) must never reach a log or an XCom.
    """
    home, folder = e2e_dir / "home", e2e_dir / "pipelines"
    folder.mkdir()
    catalog = f"iceberg_{uuid.uuid4().hex[:8]}"
    postgres.create_databases(catalog)
    path = write_demo_pipeline(folder / f"{NAME}.yaml", NAME, broker.bootstrap_servers,
                               target__catalog__uri="${E2E_CATALOG_URI}", tail__schedule=None,
                               tail__restart_backoff_seconds=0.5)  # the failing tail's restarts: no need to wait
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TAILFILL_HOME", str(home))  # the YAML's ${TAILFILL_HOME} resolves as in Airflow
        mp.setenv("E2E_CATALOG_URI", postgres.url(catalog).replace("://tailfill@", f"://tailfill:{CATALOG_SECRET}@"))
        cfg = load_pipeline(path)
        produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, HISTORY, PARTITIONS, bad_every=BAD_EVERY)
        yield cfg


@pytest.fixture(scope="module")
def airflow(pipeline, e2e_dir, postgres):
    # Three Spark slots: two backfill lanes side by side, and a slot kept for the tail.
    with local_airflow(e2e_dir, Path(pipeline.path).parent, postgres, (BACKFILL, INCREMENTAL),
                       env={"TAILFILL_SPARK_SLOTS": "3"}) as server:
        yield server


def test_backfill_through_rest_api_then_incremental_is_complete(airflow, pipeline):
    cfg = pipeline
    run_id = airflow.trigger_dag(BACKFILL, PARAMS)
    started = time.monotonic()
    run = airflow.wait_for_run(BACKFILL, run_id, timeout=600)
    print(f"backfill {run_id}: {run['state']} in {time.monotonic() - started:.0f} s")
    assert run["conf"] == PARAMS

    # The params were used: two lanes (max_parallel_slices=2) carrying the three slices.
    tis = airflow.task_instances(BACKFILL, run_id)
    by_task: dict[str, list[dict]] = {}
    for ti in tis:
        by_task.setdefault(ti["task_id"], []).append(ti)
    assert sorted(t["map_index"] for t in by_task["ingest_slice"]) == [0, 1], by_task["ingest_slice"]
    assert sorted(t["map_index"] for t in by_task["validate_slice"]) == [0, 1]
    assert {t["state"] for t in tis} == {"success"}, [(t["task_id"], t["map_index"], t["state"]) for t in tis]
    print("task durations (s): " + ", ".join(f"{t['task_id']} {t['duration']:.1f}" for t in tis))
    lanes = airflow.xcom(BACKFILL, run_id, "plan")
    assert [lane["slices"] for lane in lanes] == [[0], [1, 2]]
    args = lanes[1]["args"]  # a lane runs exactly the planned bounds of its slices
    planned = json.loads(args[args.index("--slices") + 1])
    assert [(s["index"], s["count"]) for s in planned] == [(1, 3), (2, 3)]
    summary = airflow.xcom(BACKFILL, run_id, "summary")
    assert (summary["offsets"], summary["lanes"]) == (HISTORY, 2)
    assert summary["rows"] + summary["quarantined"] == HISTORY and summary["quarantined"] > 0
    # On Postgres with the LocalExecutor the two lanes' spark-submits really ran side by side.
    first, second = sorted(by_task["ingest_slice"], key=lambda t: t["map_index"])
    starts = [datetime.fromisoformat(t["start_date"]) for t in (first, second)]
    ends = [datetime.fromisoformat(t["end_date"]) for t in (first, second)]
    assert max(starts) < min(ends), f"lanes ran one after the other: {list(zip(starts, ends, strict=True))}"
    engine = sqlalchemy.create_engine(airflow.metadata_url)  # and the runs are recorded on Postgres
    try:
        with engine.connect() as conn:
            recorded = conn.execute(sqlalchemy.text("SELECT count(*) FROM dag_run WHERE dag_id = :d AND run_id = :r"),
                                    {"d": BACKFILL, "r": run_id}).scalar()
    finally:
        engine.dispose()
    assert recorded == 1
    history = high_watermarks(cfg)
    assert sum(history.values()) == HISTORY
    assert_exactly_once(cfg, history)
    RUNS["backfill"] = run_id

    # Each lane is labelled by its slices; its progress was published from before the first batch
    # to the end; the table's asset got an event per lane with its offsets and rows.
    lane = min(by_task["ingest_slice"], key=lambda t: t["map_index"])
    label = lanes[0]["label"]
    assert label.startswith("slice 1 of 3 (") and lanes[1]["label"].startswith("slices 2-3 of 3 ("), lanes
    planned = label.split("(")[1].split(" ")[0]  # e.g. "1,334"
    RUNS["lane0_label"], RUNS["lane0_planned"] = label, planned
    assert lane["rendered_map_index"] == label
    assert min(by_task["validate_slice"], key=lambda t: t["map_index"])["rendered_map_index"] == label
    progress = airflow.xcom(BACKFILL, run_id, "ingest_slice", key="progress", map_index=0)
    assert (progress["state"], f"{progress['offsets_done']:,}", progress["percent"]) == ("finished", planned, 100.0)
    log = airflow.task_log(lane, max_lines=10_000)
    assert f"progress {label}: [running] 0/{planned} offsets (0%) · 0 rows/s · first batch running" in log, log
    assert f"progress {label}: [finished] {planned}/{planned} offsets (100%)" in log, log
    assert "Exception in thread" not in log and "SparkContext" not in log  # Spark's chatter is in the output file
    events = asset_events(airflow, f"iceberg://tailfill/{cfg.target.namespace}/{cfg.target.table}")
    assert sorted(e["extra"]["run_id"] for e in events) == sorted(lane["run_id"] for lane in lanes)
    assert sum(e["extra"]["offsets"] for e in events) == HISTORY
    assert sum(e["extra"]["rows"] + e["extra"]["quarantined"] for e in events) == HISTORY
    # Each event also says what the table held then: its snapshot and its committed offsets (both lanes' by
    # the time the later one validated).
    assert all(e["extra"]["snapshot_id"] for e in events)
    assert max(e["extra"]["table_offsets"] for e in events) == HISTORY
    # The event and the summary's log name the report and Data Docs by the plugin's HTTP URLs, which any
    # browser reaching Airflow opens, never a file:// path of the worker's disk.
    reports = sorted(e["extra"]["report"] for e in events)
    assert reports == [f"{airflow.url}/tailfill/report/{BACKFILL}/{airflow._q(run_id)}/{i}" for i in (0, 1)], reports
    assert {e["extra"]["data_docs"] for e in events} == {f"{airflow.url}/tailfill/docs/{BACKFILL}/index.html"}
    status, body = airflow.get_text(reports[0])
    assert status == 200 and "COMPLETE" in body and f"../../../docs/{BACKFILL}/" in body and "file://" not in body
    summary_log = airflow.task_log(by_task["summary"][0], max_lines=10_000)
    assert reports[1] in summary_log and "file://" not in summary_log, summary_log
    assert " error " not in summary_log, summary_log
    # Reading the lanes' results logs no "[error] XCom not found" (in the worker's own log, not the task's).
    noise = [line for line in airflow.log_path.read_text(errors="replace").splitlines()
             if "XCom not found" in line and run_id in line]
    assert not noise, noise

    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, LIVE, PARTITIONS, bad_every=BAD_EVERY)
    tail_id = airflow.trigger_dag(INCREMENTAL, {})
    started = time.monotonic()
    airflow.wait_for_run(INCREMENTAL, tail_id, timeout=480)
    print(f"incremental {tail_id}: success in {time.monotonic() - started:.0f} s")
    RUNS["tail"] = tail_id

    high = high_watermarks(cfg)
    assert sum(high.values()) == HISTORY + LIVE
    _, bad = assert_exactly_once(cfg, high)
    assert bad, "the sample's bad records should be quarantined"
    latest = read_latest(open_pipeline(cfg))
    assert latest is not None, "no validation report written"
    assert latest.success, latest.problems
    assert len(latest.runs) == 1 and latest.runs[0].startswith(f"af-{NAME}-tail-"), latest.runs
    assert latest.offsets_checked == LIVE

    # Nothing new: the next incremental run stops after ``tune``, without Spark.
    idle_id = airflow.trigger_dag(INCREMENTAL, {})
    airflow.wait_for_run(INCREMENTAL, idle_id, timeout=300)
    states = {t["task_id"]: t["state"] for t in airflow.task_instances(INCREMENTAL, idle_id)}
    assert states == {"preflight": "success", "tune": "success", "tail": "skipped", "validate": "skipped",
                      "report": "skipped", "objective": "skipped"}, states


@pytest.fixture(scope="module")
def backfill_run(airflow) -> str:
    """A backfill run that succeeded: the first test's, or a new one when that test was not selected
    (``pytest -m faults`` runs the retry test alone)."""
    if "backfill" not in RUNS:
        run_id = airflow.trigger_dag(BACKFILL, PARAMS)
        airflow.wait_for_run(BACKFILL, run_id, timeout=600)  # raises unless the run succeeded
        RUNS["backfill"] = run_id
    return RUNS["backfill"]


@pytest.mark.faults
def test_a_retry_of_a_lane_that_already_succeeded_commits_nothing(airflow, pipeline, backfill_run):
    """Clear a finished lane (and what follows it) of the backfill: Airflow runs it again, as a retry
    would after a worker lost the task's success. The lane finds every offset committed."""
    cfg, run_id = pipeline, backfill_run
    airflow.request("POST", f"/api/v2/dags/{BACKFILL}/clearTaskInstances",
                    {"dry_run": False, "dag_run_id": run_id, "task_ids": [["ingest_slice", 0]], "only_failed": False,
                     "include_downstream": True, "reset_dag_runs": True})
    run = airflow.wait_for_run(BACKFILL, run_id, timeout=300)
    assert run["state"] == "success", airflow.describe_run(BACKFILL, run_id)
    [lane] = [t for t in airflow.task_instances(BACKFILL, run_id) if t["task_id"] == "ingest_slice"
              and t["map_index"] == 0]
    assert (lane["state"], lane["try_number"]) == ("success", 2)
    assert airflow.xcom(BACKFILL, run_id, "ingest_slice", key="result", map_index=0) == []  # nothing left to run
    prove(cfg, "Airflow retry of a slice that already succeeded",
          f"lane 0 of backfill run {run_id} cleared after it succeeded (with its validation and the summary)",
          "Airflow ran it again (try 2): the job found its slice committed and started no query; the lane's "
          "validation passed again", 0)


def asset_events(airflow: AirflowServer, uri: str) -> list[dict]:
    """The events of the asset with ``uri``, oldest first."""
    assets = [a for a in airflow.request("GET", "/api/v2/assets", params={"limit": 100})["assets"] if a["uri"] == uri]
    assert len(assets) == 1, f"no asset {uri}"
    return airflow.request("GET", "/api/v2/assets/events",
                           params={"asset_id": assets[0]["id"], "order_by": "timestamp"})["asset_events"]


def test_trigger_form_and_grid_in_headless_chromium(airflow, pipeline, browser, shot):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 45)
    login(browser, airflow)

    # The DAG page's Trigger button opens the params form.
    before = {r["dag_run_id"] for r in airflow.dag_runs(BACKFILL)}
    slices = open_trigger_form(browser, airflow, BACKFILL, "element_slices")
    form_fields = {e.get_attribute("name"): e.get_attribute("value")
                   for e in browser.find_elements(By.CSS_SELECTOR, "input[name^=element_]")}
    assert form_fields == {"element_from_offsets": "earliest", "element_to_offsets": "cutover",
                           "element_slices": "4", "element_max_parallel_slices": "2",  # the pool's 3 slots less 1
                           "element_max_offsets_per_second": "", "element_committed_ranges": "skip"}, form_fields
    set_field(browser, slices, "2")
    assert "Run Parameters" in browser.find_element(By.TAG_NAME, "body").text
    shot("trigger-form")

    submit_trigger_form(browser)
    wait.until(ec.invisibility_of_element_located((By.NAME, "element_slices")))

    new = airflow.new_runs(BACKFILL, before)
    assert len(new) == 1, new
    run = new[0]
    assert run["run_type"] == "manual" and run["conf"].get("slices") == 2, run

    browser.get(f"{airflow.url}/dags/{BACKFILL}/runs/{run['dag_run_id']}")
    wait.until(lambda d: "ingest_slice" in d.find_element(By.TAG_NAME, "body").text)
    shot("grid-after-trigger")

    done = airflow.wait_for_run(BACKFILL, run["dag_run_id"], timeout=480)
    assert done["state"] == "success"
    browser.get(f"{airflow.url}/dags/{BACKFILL}")
    wait.until(lambda d: "ingest_slice" in d.find_element(By.TAG_NAME, "body").text)
    time.sleep(2)  # the grid bars load after the task list
    assert "/auth/login" not in browser.current_url
    shot("grid-finished")


def test_lane_links_progress_and_proof_in_headless_chromium(airflow, pipeline, browser, shot):
    """From the lane in the grid to its proof: extra links served by Airflow, the run's progress tab."""
    assert "backfill" in RUNS, "needs the backfill run of test_backfill_through_rest_api_then_incremental_is_complete"
    run_id, label, planned = RUNS["backfill"], RUNS["lane0_label"], RUNS["lane0_planned"]
    links = airflow.extra_links(BACKFILL, run_id, "ingest_slice", map_index=0)
    assert set(links) == {"Completeness report", "Progress and batch reports", "Data Docs", "Spark job output",
                          "Quarantine and counts"}
    expected = {"Completeness report": f"tailfill completeness: {NAME} af-{NAME}-backfill-lane0-",
                "Progress and batch reports": label, "Data Docs": "Data Docs", "Spark job output": "TAILFILL_RESULT",
                "Quarantine and counts": "Counts per partition"}
    for name, url in links.items():
        assert url and url.startswith(f"{airflow.url}/tailfill/"), (name, url)
        status, body = airflow.get_text(url)
        assert status == 200 and expected[name] in body, (name, url, status, body[:500])
    with pytest.raises(urllib.error.HTTPError) as refused:  # without a login the pages are refused
        urllib.request.urlopen(links["Completeness report"], timeout=30)
    assert refused.value.code in (401, 403)

    login(browser, airflow)
    lane_page = f"{airflow.url}/dags/{BACKFILL}/runs/{run_id}/tasks/ingest_slice/mapped/0"
    browser.get(lane_page)  # the log: progress lines, no Spark chatter; the label in the header
    wait_for_text(browser, shot, "lane-log-with-progress", label, f"[finished] {planned}/{planned} offsets (100%)")
    browser.get(lane_page + "/details")  # Airflow shows extra links in the task instance's details
    wait_for_text(browser, shot, "lane-extra-links", "Extra Links", "Completeness report", "Data Docs")
    browser.get(links["Completeness report"])  # the UI's session cookie is the login
    wait_for_text(browser, shot, "completeness-report", "COMPLETE")
    browser.get(f"{airflow.url}/tailfill/run/{BACKFILL}/{run_id}")
    wait_for_text(browser, shot, "run-progress", label, "finished", f"{planned}/{planned}", "100.0%",
                  f"COMPLETE: every one of {HISTORY:,} offsets landed exactly once", "quarantined in 2 lane(s)")
    browser.get(links["Quarantine and counts"])  # every quarantined record with its offset and error
    text = wait_for_text(browser, shot, "quarantine", "Counts per partition", "Quarantined records (")
    assert f"{pipeline.source.topic}[0]" in text and "malformed" in text.lower(), text[:2000]
    browser.get(f"{airflow.url}/dags/{BACKFILL}/runs/{run_id}/tasks/ingest_slice/mapped")  # the lanes list
    wait_for_text(browser, shot, "lanes-labelled", label)


def _loopback(addr: str) -> bool:
    """127.0.0.1, ::1, or 127.0.0.1 as an IPv6 socket has it (``::ffff:7f00:1``: a Spark JVM's)."""
    ip = ipaddress.ip_address(addr)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


def test_nothing_airflow_starts_listens_beyond_loopback(airflow):
    """After the runs above (scheduler, triggerer, task runners, Spark jobs), every socket an Airflow process
    listens on is loopback, the task log servers included (``airflow standalone`` would bind them on every
    interface)."""
    sockets = airflow.listening()
    print("listening: " + ", ".join(f"{addr}:{port} (pid {pid})" for pid, addr, port in sockets))
    assert sockets and all(_loopback(addr) for _, addr, _ in sockets), sockets
    ports = {port for _, _, port in sockets}
    assert {airflow.port, int(airflow.env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"]),
            int(airflow.env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"])} <= ports, sockets


def test_tailfill_tabs_of_the_run_and_of_tasks_that_are_not_lanes_in_headless_chromium(airflow, pipeline, browser,
                                                                                      shot):
    """The run tab leads with the verdict and links every page; the Tailfill tab of tasks that are not mapped
    (tail, preflight) renders (no ``int_parsing`` error); the quarantine page opens from the run tab."""
    assert {"backfill", "tail"} <= set(RUNS), "needs the runs of test_backfill_through_rest_api_then_incremental"
    run_id, label = RUNS["backfill"], RUNS["lane0_label"]
    login(browser, airflow)

    browser.get(f"{airflow.url}/dags/{BACKFILL}/runs/{run_id}/plugin/tailfill_run")
    text = wait_for_tab(browser, shot, "run-tab-verdict", f"COMPLETE: every one of {HISTORY:,} offsets landed exactly",
                        "Links", "completeness report", "Data Docs", "quarantined records and counts per partition")
    assert f"{label}: completeness report · progress and batch reports · Spark job output" in text, text
    from selenium.webdriver.common.by import By

    [frame] = browser.find_elements(By.TAG_NAME, "iframe")
    browser.switch_to.frame(frame)
    hrefs = {a.text: a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "ul.links a")}
    browser.switch_to.default_content()
    assert hrefs["quarantined records and counts per partition"] == f"{airflow.url}/tailfill/quarantine/{BACKFILL}"
    assert hrefs["Data Docs"] == f"{airflow.url}/tailfill/docs/{BACKFILL}/index.html"
    browser.get(hrefs["quarantined records and counts per partition"])
    text = wait_for_text(browser, shot, "quarantine-from-run-tab", "Counts per partition", "Quarantined records (")
    assert "malformed" in text.lower() and f"{pipeline.source.topic}[0]" in text, text[:2000]

    for dag, run, task, expected in ((INCREMENTAL, RUNS["tail"], "tail", ("tail", "finished, try 1")),
                                     (INCREMENTAL, RUNS["tail"], "preflight", ("tail", "finished")),
                                     (BACKFILL, run_id, "preflight", ("COMPLETE", label))):
        browser.get(f"{airflow.url}/dags/{dag}/runs/{run}/tasks/{task}/plugin/tailfill_lane")
        text = wait_for_tab(browser, shot, f"task-tab-{dag}-{task}", *expected)
        assert "int_parsing" not in text and "MAP_INDEX" not in text, text


def test_an_impossible_range_fails_before_spark_with_one_line_in_headless_chromium(airflow, pipeline, browser, shot):
    """A To past the topic's end fails the plan at once, naming the partition, the asked end
    and the broker's; no lane starts a Spark job; the UI shows the line."""
    topic = pipeline.source.topic
    ends = high_watermarks(pipeline)
    asked = {str(p): (500_000 if p == 0 else end) for p, end in ends.items()}
    run_id = airflow.trigger_dag(BACKFILL, {"to_offsets": json.dumps({topic: asked})})
    run = airflow.wait_for_end(BACKFILL, run_id)
    states = {(t["task_id"], t["map_index"]): (t["state"], t["try_number"])
              for t in airflow.task_instances(BACKFILL, run_id)}
    assert run["state"] == "failed" and states[("plan", -1)] == ("failed", 1), states  # no retry: it cannot succeed
    assert states[("ingest_slice", -1)][0] == "upstream_failed", states  # never expanded: no spark-submit
    plan = next(t for t in airflow.task_instances(BACKFILL, run_id) if t["task_id"] == "plan")
    errors = [line for line in airflow.task_log(plan, max_lines=10_000).splitlines() if " error " in line]
    high = ends[0]
    line = f"backfill bounds past the end of topic {topic!r}"
    assert errors and line in errors[0] and f"{topic}[0]: asked up to 500,000, the broker's end is {high:,}" \
        in errors[0], errors

    login(browser, airflow)
    browser.get(f"{airflow.url}/dags/{BACKFILL}/runs/{run_id}/tasks/plan")
    wait_for_text(browser, shot, "impossible-range", "asked up to 500,000", f"the broker's end is {high:,}")


STOPPING = ("killing its spark-submit", "stopping its query on the Spark Connect server")  # on_kill's line


def incremental_held_before_commit(airflow: AirflowServer, faults: Path) -> tuple[str, dict]:
    """Trigger an incremental run and wait until its tail's job holds a prepared batch before its commit (the
    ``pause-before-commit`` failpoint armed by the caller); the run's id and its tail task instance."""
    run_id = airflow.trigger_dag(INCREMENTAL, {})
    deadline = time.monotonic() + 300
    while True:
        tail = next(t for t in airflow.task_instances(INCREMENTAL, run_id) if t["task_id"] == "tail")
        if (faults / "before-commit").exists():
            return run_id, tail
        assert time.monotonic() < deadline and tail["state"] not in (*FINISHED, "skipped", "upstream_failed"), \
            airflow.describe_run(INCREMENTAL, run_id)
        time.sleep(0.5)


def test_marking_a_run_failed_while_its_tail_runs_stops_it_with_one_line(airflow, pipeline, backfill_run):
    """Marking the run failed while its Spark task runs kills the job, and the task's log says so in one line
    (no ``invalid_state`` traceback). (The backfill records the cutover when this test runs alone: the
    records produced here are the tail's.)"""
    cfg = pipeline
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 200, PARTITIONS)
    faults = Path(os.environ["TAILFILL_FAULT_DIR"])
    (faults / "pause-before-commit").touch()  # the job holds before its commit: it is running when marked
    try:
        run_id, tail = incremental_held_before_commit(airflow, faults)
        airflow.request("PATCH", f"/api/v2/dags/{INCREMENTAL}/dagRuns/{airflow._q(run_id)}", {"state": "failed"})
        deadline = time.monotonic() + 120
        while not any(line in airflow.task_log(tail, max_lines=10_000) for line in STOPPING):
            assert time.monotonic() < deadline, airflow.describe_run(INCREMENTAL, run_id)
            time.sleep(0.5)
    finally:  # let the held batch go: its job is stopping
        (faults / "pause-before-commit").unlink()
        (faults / "before-commit.release").touch()
    deadline = time.monotonic() + 120
    while True:  # the task's log is whole once its runner has gone
        log = airflow.task_log(tail, max_lines=10_000)
        if "stopped: its task's state was changed in Airflow" in log or time.monotonic() > deadline:
            break
        time.sleep(2)
    for name in ("before-commit", "before-commit.release", "before-commit.arrivals"):
        (faults / name).unlink(missing_ok=True)
    time.sleep(5)  # the lines a runner could still write after it
    log = airflow.task_log(tail, max_lines=10_000)
    assert "stopped: its task's state was changed in Airflow while it ran" in log, log
    assert "invalid_state" not in log and "Traceback" not in log and "Failed to report" not in log, log
    assert "Task failed with exception" not in log, log


def test_failed_tail_starts_with_its_cause_and_fix(airflow, pipeline, browser, shot):
    """A job failure: the task's error and log lead with cause and fix, the Java stack is elsewhere."""
    cfg = pipeline
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 400, PARTITIONS)
    fault = Path(os.environ["TAILFILL_FAULT_DIR"]) / "fail-before-commit"
    fault.write_text("1000")  # every batch fails before its commit: the job gives up after its budget
    run_id = airflow.trigger_dag(INCREMENTAL, {})
    try:
        deadline = time.monotonic() + 400
        while (tail := next(t for t in airflow.task_instances(INCREMENTAL, run_id) if t["task_id"] == "tail"))[
                "state"] not in ("up_for_retry", "failed"):
            assert time.monotonic() < deadline, airflow.describe_run(INCREMENTAL, run_id)
            time.sleep(3)
        log = airflow.task_log(tail, max_lines=10_000)
        errors = [line for line in log.splitlines() if " error " in line]
        assert errors, log
        head = f"ingest of {NAME} (tail, tail, run af-{NAME}-tail-"
        assert head in errors[0] and f"failed (exit 2): [{NAME} tail] 4 consecutive failed attempts" in errors[0] \
            and "last cause: InjectedFault" in errors[0], errors
        assert "(fix: read the cause in the job output" in errors[0], errors[0]
        assert "committed before the failure: nothing" in log, log
        assert f"JobFailed: {head}" in log and "Cannot execute" not in log, log  # the task's error
        assert "at org.apache" not in log, log  # the Java stack is in the job output file
        output = airflow.extra_links(INCREMENTAL, run_id, "tail")["Spark job output"]
        status, body = airflow.get_text(output)
        assert status == 200 and "InjectedFault" in body

        login(browser, airflow)
        browser.get(f"{airflow.url}/dags/{INCREMENTAL}/runs/{run_id}/tasks/tail")
        wait_for_text(browser, shot, "failure-headline", "failed (exit 2)")
    finally:
        fault.write_text("0")
        airflow.request("PATCH", f"/api/v2/dags/{INCREMENTAL}/dagRuns/{airflow._q(run_id)}", {"state": "failed"})


def scheduler_group(airflow: AirflowServer) -> int:
    """The process group of this Airflow's scheduler: the scheduler, its LocalExecutor workers, their task
    runners and the tasks they run."""
    for pid in processes_with(airflow.marker):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"scheduler" in argv and os.getpgid(pid) == pid:
                return pid
    raise AssertionError(f"no scheduler among this Airflow's processes:\n{airflow.log_tail()}")


@pytest.mark.faults
def test_the_scheduler_killed_with_its_workers_while_a_tail_runs_then_airflow_restarts(airflow, pipeline,
                                                                                       backfill_run):
    """SIGKILL the scheduler's process group — the scheduler, its LocalExecutor workers, the task runner and the
    tail task — while the tail's job holds a prepared batch before its commit. The launcher stops the rest of
    Airflow (and its Spark Connect server); Airflow starts again on the same metadata database, finds the task
    orphaned, and runs it again as a new try: the tail resumes at the ledger's position and the run succeeds."""
    cfg = pipeline
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, PARTITIONS, bad_every=BAD_EVERY)
    faults = Path(os.environ["TAILFILL_FAULT_DIR"])
    (faults / "pause-before-commit").touch()  # the job holds before its commit: running when the kill comes
    try:
        run_id, tail = incremental_held_before_commit(airflow, faults)
        assert tail["state"] == "running", tail
        held = committed(cfg)
        os.killpg(scheduler_group(airflow), signal.SIGKILL)
        airflow.stop()  # what the launcher has not stopped yet (its Spark Connect server too), and the launcher
    finally:  # released only now: the held batch's server is gone with Airflow
        (faults / "pause-before-commit").unlink(missing_ok=True)
        (faults / "before-commit.release").touch()
    time.sleep(2)
    for name in ("before-commit", "before-commit.release", "before-commit.arrivals"):
        (faults / name).unlink(missing_ok=True)
    assert committed(cfg) == held, "the held batch committed after its job was killed"
    airflow.start()
    run = airflow.wait_for_run(INCREMENTAL, run_id, timeout=900)
    tail = next(t for t in airflow.task_instances(INCREMENTAL, run_id) if t["task_id"] == "tail")
    assert run["state"] == "success" and tail["try_number"] > 1, (run, tail)
    prove(cfg, "Airflow's scheduler and workers SIGKILLed while a tail runs",
          "SIGKILL to the scheduler's process group (scheduler, LocalExecutor workers, task runner, the tail task) "
          "while the tail's job held a prepared batch before its commit; Airflow restarted on its metadata database",
          f"the launcher stopped the rest of Airflow; after the restart the scheduler reset the orphaned task and "
          f"ran it again (try {tail['try_number']}): the tail resumed at the ledger's position ({held:,} offsets) "
          "and the run succeeded", 0)


def test_no_secret_in_any_task_log_xcom_or_state_file(airflow, pipeline, e2e_dir):
    """After every run above (backfills, incrementals, a failed tail), the catalog URI's password is in
    no task log, no XCom and no file under TAILFILL_HOME; the preflight's log shows the URI redacted,
    so the search reads text that carried it."""
    logs = [p for p in (e2e_dir / "airflow").rglob("*") if p.is_file() and "logs" in p.parts]
    state = [p for p in (e2e_dir / "home").rglob("*") if p.is_file()]
    assert logs and state
    leaked = [str(p) for p in [*logs, *state] if CATALOG_SECRET.encode() in p.read_bytes()]
    assert not leaked, f"the catalog password is in {leaked[:5]}"
    assert any(b"tailfill:***@" in p.read_bytes() for p in logs), "no task log shows the catalog URI at all"
    engine = sqlalchemy.create_engine(airflow.metadata_url)
    try:
        with engine.connect() as conn:
            values = [str(v) for (v,) in conn.execute(sqlalchemy.text("SELECT value FROM xcom"))]
    finally:
        engine.dispose()
    assert values and not [v for v in values if CATALOG_SECRET in v]
