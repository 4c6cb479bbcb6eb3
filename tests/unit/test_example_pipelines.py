"""Airflow makes DAGs only for pipelines the demo can run: the shipped examples that need a Schema Registry or a
change stream (``example: true``) are opt-in with ``TAILFILL_AIRFLOW_EXAMPLES=1``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tailfill.pipeline.load import load_pipeline

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "pipelines").glob("*.yaml"))


@pytest.fixture
def folder(tmp_path) -> Path:
    """A copy of the shipped pipelines folder."""
    out = tmp_path / "pipelines"
    out.mkdir()
    for path in SHIPPED:
        shutil.copy(path, out / path.name)
    return out


def test_only_the_demo_is_not_an_example():
    assert {p.stem: load_pipeline(p).example for p in SHIPPED} == {
        p.stem: p.stem != "demo" for p in SHIPPED}
    assert [p.stem for p in SHIPPED if p.stem.startswith("orders_")]  # the examples are still shipped


def test_airflow_makes_dags_for_the_demo_only_unless_examples_are_asked_for(folder, dag_factory, monkeypatch, caplog):
    monkeypatch.delenv("TAILFILL_AIRFLOW_EXAMPLES", raising=False)
    with caplog.at_level("INFO"):
        assert sorted(dag_factory.build_dags(folder)) == ["demo_backfill", "demo_incremental", "demo_maintenance"]
    assert "no DAGs for the example pipeline orders_avro (example: true; TAILFILL_AIRFLOW_EXAMPLES=1 makes them)" \
        in caplog.text

    monkeypatch.setenv("TAILFILL_AIRFLOW_EXAMPLES", "1")
    dags = dag_factory.build_dags(folder)
    assert {"demo_backfill", "orders_avro_backfill", "orders_cdc_incremental", "orders_protobuf_backfill"} <= set(dags)
