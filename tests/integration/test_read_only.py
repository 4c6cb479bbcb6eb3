"""Reading never creates: every check, status and page of a pipeline whose tables were never made
leaves the catalog as it found it. Only the planner makes tables (and records the cutover)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tailfill import cli
from tailfill.dev.sample import produce_sample
from tailfill.errors import LakeError
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate
from tailfill.run.maintain import maintain

pytestmark = pytest.mark.integration
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins"))


def made(cfg) -> dict[str, bool]:
    """Which of the pipeline's tables (and its namespace) the catalog holds."""
    with open_pipeline(cfg) as pipeline:
        catalog, target = pipeline.catalog, cfg.target
        return {"namespace": (target.namespace,) in catalog.list_namespaces(),
                "data": catalog.table_exists((target.namespace, target.table)),
                "quarantine": catalog.table_exists((target.namespace, target.quarantine_name))}


NOTHING = {"namespace": False, "data": False, "quarantine": False}


def test_status_and_preflight_of_a_pipeline_without_tables_leave_the_catalog_without_them(make_pipeline, capsys):
    cfg = make_pipeline()
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 100, 4)

    assert cli.main(["status", cfg.path]) == 0
    assert made(cfg) == NOTHING
    assert cli.main(["preflight", cfg.path, "--mode", "tail"]) == 0
    assert cli.main(["preflight", cfg.path, "--mode", "backfill"]) == 0
    assert made(cfg) == NOTHING
    out = capsys.readouterr().out
    assert "not made yet" in out and "ready" in out  # status and preflight say so, and pass

    assert cli.main(["backfill", cfg.path]) == 0  # the planner makes them
    assert made(cfg) == {"namespace": True, "data": True, "quarantine": True}


def test_validation_upkeep_and_the_airflow_pages_make_no_tables(make_pipeline):
    from tailfill_airflow.live import live_context
    from tailfill_airflow.views import table_contents

    cfg = make_pipeline()
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 100, 4)
    with open_pipeline(cfg) as pipeline:
        with pytest.raises(LakeError, match=r"nothing to validate: the tables of pipeline itest were never made"):
            validate(pipeline)
        assert maintain(pipeline, cfg.maintenance).tables == []
        assert table_contents(pipeline, limit=3) == ({}, [])
        page = live_context(pipeline)
    assert page["committed"] == 0 and page["cutover"] is None and page["backfill_pending"] == 100
    assert made(cfg) == NOTHING
