"""A pipeline with a table per topic, run by its DAGs on a real local Airflow.

One pattern pipeline over three topics of the session broker, routed by ``{topic.1}``. The backfill is
triggered for two of the topics only: their tables get a lane each, a verdict each and an asset event each,
the third table nothing. Then records arrive on every topic and a fourth topic appears: the incremental run
tails each table with offsets waiting in a task of its own (the new topic's table from its earliest offset),
validates each, and gives the verdict table by table; every offset lands exactly once in its table. Last, a
replay of part of one table's committed offsets is the run's verdict, validated over exactly that part.
"""

from __future__ import annotations

import html
import json
import re
import urllib.parse
import uuid
from pathlib import Path

import pytest
from airflow_server import local_airflow, text_of
from helpers import assert_each_offset_once, committed, write_demo_pipeline

from tailfill.dev.sample import produce_sample
from tailfill.pipeline.load import load_pipeline
from tailfill.run.routed import known_routes
from tailfill.source.topics import ensure_topic

pytestmark = pytest.mark.integration

NAME, GONE = "shop", "shopgone"
BACKFILL, INCREMENTAL = f"{NAME}_backfill", f"{NAME}_incremental"
PARTITIONS, HISTORY, LIVE, LATE = 2, 600, 100, 50
PREFIX = f"r{uuid.uuid4().hex[:8]}"
ORDERS, CUSTOMERS, REFUNDS, INVOICES = (f"{PREFIX}.{t}" for t in ("orders", "customers", "refunds", "invoices"))


@pytest.fixture(scope="module")
def routed_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("airflow-routed")


@pytest.fixture(scope="module")
def pipeline(broker, routed_dir):
    folder = routed_dir / "pipelines"
    folder.mkdir()
    path = write_demo_pipeline(folder / f"{NAME}.yaml", NAME, broker.bootstrap_servers, source__topic=None,
                               source__partitions=PARTITIONS, source__topic_pattern=rf"{PREFIX}\..*",
                               target__table="{topic.1}", tail__schedule=None, maintenance__schedule=None)
    for topic in (ORDERS, CUSTOMERS, REFUNDS):
        ensure_topic(broker.bootstrap_servers, topic, PARTITIONS)
        produce_sample(broker.bootstrap_servers, topic, HISTORY, PARTITIONS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TAILFILL_HOME", str(routed_dir / "home"))  # the YAML's ${TAILFILL_HOME}, as in Airflow
        yield load_pipeline(path)


@pytest.fixture(scope="module")
def airflow(pipeline, routed_dir, postgres, refused_port):
    # Beside it, the same pipeline on a broker that is not there: its runs fail before any table is known.
    write_demo_pipeline(Path(pipeline.path).parent / f"{GONE}.yaml", GONE, f"127.0.0.1:{refused_port}",
                        source__topic=None, source__topic_pattern=rf"{PREFIX}\..*", target__table="{topic.1}",
                        tail__schedule=None, maintenance__schedule=None)
    with local_airflow(routed_dir, Path(pipeline.path).parent, postgres,
                       (BACKFILL, INCREMENTAL, f"{GONE}_incremental"), env={"TAILFILL_SPARK_SLOTS": "3"}) as server:
        yield server


def routes(cfg) -> dict:
    return {route.table: route for route in known_routes(cfg)}


def asset_extras(airflow, cfg, table: str) -> list[dict]:
    """The extras of the events of the asset of ``cfg``'s table ``table``, oldest first (none when it has none)."""
    uri = f"iceberg://{cfg.target.catalog.name}/{cfg.target.namespace}/{table}"
    # Only the alias is a DAG's outlet: each table's asset is made by its first event, and listed as not active
    # until a DAG is scheduled on it.
    assets = [a for a in airflow.request("GET", "/api/v2/assets", params={"limit": 100, "only_active": False})["assets"]
              if a["uri"] == uri]
    if not assets:
        return []
    events = airflow.request("GET", "/api/v2/assets/events", params={"asset_id": assets[0]["id"],
                                                                      "order_by": "timestamp"})["asset_events"]
    return [e["extra"] for e in events]


def run_tab_text(airflow, dag_id: str, run_id: str) -> str:
    status, body = airflow.get_text(f"{airflow.url}/tailfill/run/{dag_id}/{urllib.parse.quote(run_id, safe='')}")
    assert status == 200, body[:2000]
    return text_of(body)


def test_a_backfill_of_a_topic_no_table_reads_fails_the_run_naming_it(airflow, pipeline):
    run_id = airflow.trigger_dag(BACKFILL, {"topics": f"{PREFIX}.nope"})
    assert airflow.wait_for_end(BACKFILL, run_id, timeout=300)["state"] == "failed"
    states = {t["task_id"]: t["state"] for t in airflow.task_instances(BACKFILL, run_id)}
    assert (states["plan"], states["summary"]) == ("failed", "failed"), states  # the run's last task too
    text = run_tab_text(airflow, BACKFILL, run_id)
    assert (f"FAILED at plan (try 1): planning the backfill of {NAME} failed: topics '{PREFIX}.nope': no table of "
            f"the pipeline reads it (fix: name some of: {CUSTOMERS}, {ORDERS}, {REFUNDS})") in text, text


def test_a_tail_whose_broker_is_gone_fails_the_run_at_preflight_and_at_its_last_task(airflow):
    dag = f"{GONE}_incremental"
    run_id = airflow.trigger_dag(dag, {})
    assert airflow.wait_for_end(dag, run_id, timeout=600)["state"] == "failed"
    tasks = {t["task_id"]: t for t in airflow.task_instances(dag, run_id)}
    states = {task_id: t["state"] for task_id, t in tasks.items()}
    assert (states["preflight"], states["report"]) == ("failed", "failed"), states
    assert tasks["preflight"]["try_number"] == 1  # no retry can reach a broker that is not there: failed at once
    assert "cannot reach Kafka at" in run_tab_text(airflow, dag, run_id)


def test_a_backfill_of_some_topics_then_a_tail_of_every_table_with_a_new_topic(airflow, pipeline, broker):
    cfg = pipeline
    run_id = airflow.trigger_dag(BACKFILL, {"topics": f"{ORDERS},{CUSTOMERS}", "max_parallel_slices": 2,
                                            "slices": 2, "committed_ranges": "skip"})
    airflow.wait_for_run(BACKFILL, run_id, timeout=600)
    lanes = sorted((t["map_index"], t["rendered_map_index"]) for t in airflow.task_instances(BACKFILL, run_id)
                   if t["task_id"] == "ingest_slice")
    assert [index for index, _ in lanes] == [0, 1], lanes  # the form's two lanes dealt one to each table
    assert sorted(label.split(" · ")[0] for _, label in lanes) == ["customers", "orders"], lanes
    summary = airflow.xcom(BACKFILL, run_id, "summary")
    assert summary["verdict"] == "COMPLETE", summary
    assert {t: (v["verdict"], v["offsets"]) for t, v in summary["tables"].items()} == {
        "customers": ("COMPLETE", HISTORY), "orders": ("COMPLETE", HISTORY)}
    for table in ("orders", "customers"):
        [extra] = asset_extras(airflow, cfg, table)
        assert (extra["table"], extra["offsets"], extra["table_offsets"]) == (table, HISTORY, HISTORY), extra
    assert asset_extras(airflow, cfg, "refunds") == []
    tab = run_tab_text(airflow, BACKFILL, run_id)
    assert f"customers COMPLETE: every one of {HISTORY:,} offsets landed exactly once" in tab, tab
    assert f"orders COMPLETE: every one of {HISTORY:,} offsets landed exactly once" in tab, tab
    known = routes(cfg)
    assert sorted(known) == ["customers", "orders", "refunds"]
    assert committed(known["refunds"].cfg) == 0  # not asked for: nothing of its history read

    for topic in (ORDERS, CUSTOMERS, REFUNDS):
        produce_sample(broker.bootstrap_servers, topic, LIVE, PARTITIONS)
    ensure_topic(broker.bootstrap_servers, INVOICES, PARTITIONS)  # a topic that appears between runs
    produce_sample(broker.bootstrap_servers, INVOICES, LATE, PARTITIONS)
    tail_id = airflow.trigger_dag(INCREMENTAL, {})
    airflow.wait_for_run(INCREMENTAL, tail_id, timeout=600)
    tails = {t["rendered_map_index"]: t["state"] for t in airflow.task_instances(INCREMENTAL, tail_id)
             if t["task_id"] == "validate"}
    # refunds' tail starts at the end its first tail found (its history is a backfill's): nothing waiting there
    assert tails == {"customers": "success", "invoices": "success", "orders": "success"}, tails
    report = airflow.xcom(INCREMENTAL, tail_id, "report")
    assert {t: (v["verdict"], v["offsets"]) for t, v in report["tables"].items()} == {
        "customers": ("COMPLETE", LIVE), "invoices": ("COMPLETE", LATE), "orders": ("COMPLETE", LIVE)}, report
    tab = run_tab_text(airflow, INCREMENTAL, tail_id)
    assert f"invoices COMPLETE: every one of {LATE:,} offsets landed exactly once" in tab, tab
    known = routes(cfg)
    for table, topic in (("orders", ORDERS), ("customers", CUSTOMERS), ("invoices", INVOICES)):
        assert assert_each_offset_once(known[table].cfg, [topic]) == {topic: HISTORY + LIVE if table != "invoices"
                                                                      else LATE}
    assert [e["offsets"] for e in asset_extras(airflow, cfg, "invoices")] == [LATE]


def test_a_replay_of_one_table_is_its_verdict_with_its_validation(airflow, pipeline):
    """The form's ``replay`` over a committed range of one table (after the backfill above): no lane runs, the run
    is REPLAYED with that table's replay validated over exactly the replayed offsets, on the tab and in the summary,
    and every offset is still in the table once."""
    orders = routes(pipeline)["orders"].cfg
    kept = committed(orders)
    assert kept == HISTORY + LIVE, "needs the backfill and tail of test_a_backfill_of_some_topics_then_a_tail_…"
    to = {ORDERS: {str(p): 100 for p in range(PARTITIONS)}}
    run_id = airflow.trigger_dag(BACKFILL, {"topics": ORDERS, "from_offsets": "earliest",
                                            "to_offsets": json.dumps(to), "committed_ranges": "replay"})
    airflow.wait_for_run(BACKFILL, run_id, timeout=600)
    states = {t["task_id"]: t["state"] for t in airflow.task_instances(BACKFILL, run_id)}
    assert states["ingest_slice"] == "skipped", states  # nothing left for a lane: no Spark job
    replayed = 100 * PARTITIONS
    summary = airflow.xcom(BACKFILL, run_id, "summary")
    assert (summary["verdict"], summary["replayed"], summary["offsets"]) == ("REPLAYED", replayed, 0), summary
    assert summary["headline"].startswith(f"REPLAYED {replayed:,} offsets: their rows were re-read and replaced")
    table = summary["tables"]["orders"]
    assert (table["verdict"], table["replayed"]) == ("REPLAYED", replayed), table
    proof = table["replay"]
    assert (proof["verdict"], proof["offsets"]) == ("COMPLETE", replayed), proof
    assert proof["ranges"] == {ORDERS: {str(p): [[0, 100]] for p in range(PARTITIONS)}}  # exactly the replayed range

    url = f"{airflow.url}/tailfill/run/{BACKFILL}/{urllib.parse.quote(run_id, safe='')}"
    status, body = airflow.get_text(url)
    assert status == 200 and summary["headline"] in text_of(body), text_of(body)
    [report] = re.findall(r'replay of committed offsets of table orders: <a href="([^"]+)"', body)
    status, page = airflow.get_text(urllib.parse.urljoin(url, html.unescape(report)))
    assert status == 200 and "not validated yet" not in page and proof["run_id"] in page, page[:2000]
    assert assert_each_offset_once(orders, [ORDERS]) == {ORDERS: kept}
