"""A backfill whose broker is killed mid-run, on a real local Airflow: the try fails within the pipeline's retry
ceiling, and every place a person or a script looks names the broker that is gone.

The pipeline reads a broker of its own (killed with SIGKILL once the lane has committed a batch) with a small
ceiling (``backfill.retry_ceiling_seconds``). While the job tries again, nothing commits: the lane's progress XCom,
its label in the grid and the run's tab say ``stalled: <cause>``, with no rate and no ETA. Then the try fails, with
the broker's address in its ``failure`` XCom and on the tab; once Airflow's retries have met the same dead broker
and the run has failed, the task's note names it too. The elapsed time is asserted: ``solo``.
"""

from __future__ import annotations

import time
import urllib.parse
import uuid
from pathlib import Path

import pytest
from airflow_server import AirflowError, local_airflow, text_of
from airflow_ui import login, wait_for_tab
from helpers import wait_until, write_demo_pipeline

from tailfill.dev.broker import EmbeddedBroker
from tailfill.dev.sample import produce_sample

pytestmark = [pytest.mark.integration, pytest.mark.solo]

NAME = "outage"
DAG = f"{NAME}_backfill"
CEILING_S = 45  # the pipeline's backfill.retry_ceiling_seconds
MARGIN_S = 120  # finding the broker gone (a read waits 15 s), the last attempt, the job and the task ending
RECORDS, PARTITIONS = 10_000, 2  # at 200 offsets/s: the lane runs for about a minute


@pytest.fixture(scope="module")
def outage_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("airflow-outage")


@pytest.fixture(scope="module")
def doomed_broker():
    """A broker of this module's own: the test kills it."""
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture(scope="module")
def topic(outage_dir, doomed_broker) -> str:
    folder = outage_dir / "pipelines"
    folder.mkdir()
    name = f"t-outage-{uuid.uuid4().hex[:8]}"
    write_demo_pipeline(folder / f"{NAME}.yaml", NAME, doomed_broker.bootstrap_servers, source__topic=name,
                        source__partitions=PARTITIONS, tail__schedule=None, maintenance__schedule=None,
                        backfill__slices=1, backfill__max_offsets_per_batch=300, backfill__batch_seconds=None,
                        backfill__retry_ceiling_seconds=CEILING_S)
    produce_sample(doomed_broker.bootstrap_servers, name, RECORDS, PARTITIONS)
    return name


@pytest.fixture(scope="module")
def airflow(topic, outage_dir, postgres):
    with local_airflow(outage_dir, outage_dir / "pipelines", postgres, (DAG,)) as server:
        yield server


def lane(airflow, run_id: str) -> dict:
    """The lane's task instance (its latest try)."""
    return next(t for t in airflow.task_instances(DAG, run_id) if t["task_id"] == "ingest_slice")


def progress(airflow, run_id: str) -> dict | None:
    """The lane's ``progress`` XCom (None before the task pushed one)."""
    try:
        return airflow.xcom(DAG, run_id, "ingest_slice", key="progress", map_index=0)
    except AirflowError as exc:
        if "-> 404" in str(exc):
            return None
        raise


def tab(airflow, run_id: str) -> str:
    status, body = airflow.get_text(f"{airflow.url}/tailfill/run/{DAG}/{urllib.parse.quote(run_id, safe='')}")
    assert status == 200, body[:2000]
    return text_of(body)


def test_a_broker_killed_mid_backfill_fails_the_try_within_its_ceiling_naming_the_broker(airflow, doomed_broker,
                                                                                      browser, shot):
    address = doomed_broker.bootstrap_servers
    login(browser, airflow)  # before the outage: the browser is ready when the tab has something to show
    run_id = airflow.trigger_dag(DAG, {"slices": 1, "max_parallel_slices": 1, "max_offsets_per_second": 200})
    wait_until(lambda: (progress(airflow, run_id) or {}).get("batches", 0) >= 1 or airflow.dag_run(
        DAG, run_id)["state"] in ("success", "failed"), "the lane's first committed batch", timeout=600, poll=3)
    first = progress(airflow, run_id)
    assert first and 0 < first["offsets_done"] < RECORDS, (first, airflow.describe_run(DAG, run_id))
    doomed_broker.kill()
    killed = time.monotonic()

    # While the job tries again, nothing commits: the XCom, the grid's label and the tab say stalled, and why.
    seen: dict[str, str] = {}

    def stalled_everywhere() -> bool:
        ti = lane(airflow, run_id)
        if ti["state"] != "running":
            raise AssertionError(f"the try ended ({ti['state']}) before every view said stalled: {seen}")
        seen["xcom"] = (progress(airflow, run_id) or {}).get("line", "")
        seen["label"] = ti["rendered_map_index"] or ""
        seen["tab"] = tab(airflow, run_id)
        return all("stalled: " in text for text in seen.values())

    wait_until(stalled_everywhere, "stalled on the XCom, the label and the tab", timeout=CEILING_S + MARGIN_S, poll=2)
    stalled = progress(airflow, run_id)
    assert address in stalled["stalled"], stalled  # the cause the job restarted on names the broker
    assert stalled["line"].endswith(f"stalled: {stalled['stalled']}"), stalled
    assert "rows/s" not in stalled["line"] and "ETA" not in stalled["line"] and stalled["eta_s"] is None, stalled
    assert f"stalled: {stalled['stalled']}" in seen["tab"] and "stalled: " in seen["label"], seen

    # The try fails by itself within the ceiling (and the time to notice the broker is gone), naming the broker.
    wait_until(lambda: lane(airflow, run_id)["state"] in ("up_for_retry", "failed"), "the failed try",
               timeout=CEILING_S + MARGIN_S, poll=2)
    elapsed = time.monotonic() - killed
    ti = lane(airflow, run_id)
    assert ti["try_number"] == 1 and elapsed < CEILING_S + MARGIN_S, (elapsed, ti)
    failure = airflow.xcom(DAG, run_id, "ingest_slice", key="failure", map_index=0)
    assert failure["try_number"] == 1 and address in failure["cause"], failure
    assert f"retry_ceiling_seconds: {CEILING_S}" in failure["cause"] and "gave up after" in failure["cause"], failure
    assert failure["retryable"] and failure["fix"], failure
    text = tab(airflow, run_id)
    assert "failed, try 1" in text and address in text and "Failed tries and warnings" in text, text
    assert "stalled: " not in text, text  # the try is over: its cause, not a stall

    # Airflow's retries meet the same dead broker (each fails at once: it accepts no connection); then the run
    # fails, and the task's note names the cause and the fix.
    assert airflow.wait_for_end(DAG, run_id, timeout=900, poll=5)["state"] == "failed"
    last = airflow.xcom(DAG, run_id, "ingest_slice", key="failure", map_index=0)
    assert last["try_number"] == lane(airflow, run_id)["try_number"] > 1 and address in last["cause"], last
    wait_until(lambda: lane(airflow, run_id)["note"] is not None, "the failed task's note", timeout=90, poll=2)
    note = lane(airflow, run_id)["note"]
    assert address in note and f"fix: {last['fix']}" in note, note
    text = tab(airflow, run_id)  # a failed run's lanes will never be validated: its headline says FAILED in red
    assert "FAILED: 1 of 1 lane(s) never validated" in text and "not validated yet" not in text, text

    browser.get(f"{airflow.url}/dags/{DAG}/runs/{run_id}/plugin/tailfill_run")
    wait_for_tab(browser, shot, "broker-killed-run-tab", f"failed, try {last['try_number']}", address,
                 f"retry_ceiling_seconds: {CEILING_S}", "Failed tries and warnings")
