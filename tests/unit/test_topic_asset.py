"""The Kafka topic as the DAGs' input asset and OpenLineage input, named by the broker's address: the embedded
development broker by the address it listens on while it runs, never ``embedded``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tailfill.pipeline.load import load_pipeline
from tailfill.source.embedded import state_file

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def lineage(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.delenv("TAILFILL_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.syspath_prepend(str(REPO / "plugins"))
    from tailfill_airflow import lineage

    return lineage


def test_the_embedded_broker_s_topic_is_named_by_the_address_it_listens_on(lineage, tmp_path):
    cfg = load_pipeline(REPO / "pipelines" / "demo.yaml")
    assert cfg.source.bootstrap_servers == "embedded"
    state_file(tmp_path).write_text(json.dumps({"pid": os.getpid(), "bootstrap_servers": "127.0.0.1:39092"}))
    assert lineage.kafka_dataset_names(cfg) == ("kafka://127.0.0.1:39092", ["demo-events"])
    [asset] = lineage.topic_assets(cfg)
    assert (asset.name, asset.uri, asset.group) == ("kafka://127.0.0.1:39092/demo-events",
                                                    "kafka://127.0.0.1:39092/demo-events", "kafka")


def test_a_broker_s_topic_is_named_by_its_first_bootstrap_server(lineage, monkeypatch):
    monkeypatch.setenv("TAILFILL_BOOTSTRAP_SERVERS", "10.0.0.5:9092,10.0.0.6:9092")
    cfg = load_pipeline(REPO / "pipelines" / "demo.yaml")
    assert [a.uri for a in lineage.topic_assets(cfg)] == ["kafka://10.0.0.5:9092/demo-events"]


def test_the_ingest_tasks_declare_the_topic_as_their_inlet(lineage, dag_factory, tmp_path):
    state_file(tmp_path).write_text(json.dumps({"pid": os.getpid(), "bootstrap_servers": "127.0.0.1:39092"}))
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "demo.yaml").write_text((REPO / "pipelines" / "demo.yaml").read_text())
    dags = dag_factory.build_dags(folder)
    for dag_id, task_id in (("demo_backfill", "ingest_slice"), ("demo_incremental", "tail")):
        inlets = dags[dag_id].get_task(task_id).inlets
        assert [a.uri for a in inlets] == ["kafka://127.0.0.1:39092/demo-events"], (dag_id, inlets)
