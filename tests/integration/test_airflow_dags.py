"""The Airflow DAGs: what parsing touches, and ``airflow dags test`` of the maintenance DAG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_exactly_once, backfill, high_watermarks, tables_of

from tailfill.dev.sample import produce_sample
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
from tailfill_airflow.local import local_env  # noqa: E402

AIRFLOW = str(Path(sys.executable).parent / "airflow")

# What parsing the DAG folder must not touch: Spark, the catalog, the broker client, Great Expectations.
HEAVY = ("pyspark", "pyiceberg", "confluent_kafka", "great_expectations", "tailfill.run.plan", "tailfill.lake.tables")

PARSE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
heavy = sys.argv[2].split(",")
print(json.dumps({"dags": sorted(bag.dags), "errors": {k: str(v) for k, v in bag.import_errors.items()},
                  "forms": {d: sorted(dag.params) for d, dag in bag.dags.items() if d.endswith("_backfill")},
                  "imported": sorted({h for h in heavy for m in sys.modules if m == h or m.startswith(h + ".")})}))
"""


@pytest.fixture
def airflow_env(tmp_path, home, make_pipeline):
    """Airflow settings for a pipelines folder holding just one test pipeline, and its config."""
    cfg = make_pipeline(name="afdemo", backfill__slices=2, backfill__max_offsets_per_batch=500,
                        backfill__batch_seconds=None, maintenance__expire_older_than="0s", maintenance__keep_last=1)
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "afdemo.yaml").write_text(Path(cfg.path).read_text())
    env = local_env(tmp_path / "airflow", 0, base={**os.environ, "TAILFILL_HOME": str(home),
                                                   "TAILFILL_PIPELINES": str(pipelines)})
    return cfg, env


def airflow(env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"airflow {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def test_parsing_the_dag_folder_reads_yaml_only(airflow_env):
    _, env = airflow_env
    out = subprocess.run([sys.executable, "-c", PARSE, str(REPO / "dags"), ",".join(HEAVY)], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["errors"] == {}
    assert result["dags"] == ["afdemo_backfill", "afdemo_incremental", "afdemo_maintenance"]
    assert result["imported"] == []


def test_pipelines_of_several_topics_parse_with_a_topics_field_in_their_backfill_form(airflow_env, make_pipeline):
    _, env = airflow_env
    pattern = make_pipeline(name="shop", source__topic=None, source__topic_pattern=r"shop\..*")
    Path(env["TAILFILL_PIPELINES"], "shop.yaml").write_text(Path(pattern.path).read_text())
    routed = make_pipeline(name="routed", source__topic=None, source__topic_pattern=r"shop\..*",
                           target__table="{topic.1}")  # a table per topic: its tables are found when tasks run
    Path(env["TAILFILL_PIPELINES"], "routed.yaml").write_text(Path(routed.path).read_text())
    out = subprocess.run([sys.executable, "-c", PARSE, str(REPO / "dags"), ",".join(HEAVY)], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["errors"] == {} and result["imported"] == []
    assert {"shop_backfill", "shop_incremental"} <= set(result["dags"])
    assert {"routed_backfill", "routed_incremental", "routed_maintenance"} <= set(result["dags"])
    assert "topics" in result["forms"]["shop_backfill"] and "topics" not in result["forms"]["afdemo_backfill"]
    assert "topics" in result["forms"]["routed_backfill"]


def test_dags_test_of_the_maintenance_dag_keeps_the_proof(airflow_env, spark):
    """``airflow dags test`` of the upkeep DAG on a table that many small batches built.

    The backfill and incremental DAGs run end to end on a real Airflow in ``test_airflow_e2e.py``
    (REST, scheduler, LocalExecutor, the UI); here the maintenance DAG runs the way a user would try
    it first, and the proof must still check every offset afterwards.
    """
    cfg, env = airflow_env
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 4_000, 4, bad_every=499)
    backfill(spark, cfg)
    files_before = len(list(tables_of(cfg).data.scan().plan_files()))
    airflow(env, "db", "migrate")

    # Upkeep through its DAG: small files compacted, every snapshot but the current expired, and the
    # proof still checks every offset from the archived batch audit.
    airflow(env, "dags", "test", "afdemo_maintenance")
    data = tables_of(cfg).data
    assert len(data.snapshots()) == 1
    assert len(list(data.scan().plan_files())) < files_before
    assert_exactly_once(cfg, high_watermarks(cfg))
    everything = validate(open_pipeline(cfg), all_runs=True)
    assert everything.success, everything.problems
    assert everything.offsets_checked == 4_000
