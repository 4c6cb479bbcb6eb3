"""The Airflow DAGs: parsing cost, and ``airflow dags test`` of both DAGs against the embedded broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_exactly_once, high_watermarks

from tailfill.dev.sample import produce_sample
from tailfill.lake.batch_report import runs_dir
from tailfill.lake.tables import ensure_tables
from tailfill.proof.reports import read_latest
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
                  "imported": sorted({h for h in heavy for m in sys.modules if m == h or m.startswith(h + ".")})}))
"""


@pytest.fixture
def airflow_env(tmp_path, home, make_pipeline):
    """Airflow settings for a pipelines folder holding just one test pipeline, and its config."""
    cfg = make_pipeline(name="afdemo", backfill__slices=2, maintenance__expire_older_than="0s",
                        maintenance__keep_last=1)
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


def test_dags_test_of_backfill_then_incremental_lands_each_offset_once(airflow_env):
    cfg, env = airflow_env
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, 3_000, 4, bad_every=499)
    airflow(env, "db", "migrate")

    conf = {"slices": 2, "max_parallel_slices": 1}
    airflow(env, "dags", "test", "afdemo_backfill", "--conf", json.dumps(conf))
    backfilled = high_watermarks(cfg)
    assert_exactly_once(cfg, backfilled)

    produce_sample(bs, topic, 1_000, 4, bad_every=499)
    airflow(env, "dags", "test", "afdemo_incremental")
    assert_exactly_once(cfg, high_watermarks(cfg))
    latest = read_latest(cfg)
    assert latest["success"] and latest["scope"].startswith("run af-afdemo-tail-")
    assert latest["offsets_checked"] == 1_000

    # Nothing new: the next incremental run stops at ``tune`` and starts no Spark job.
    tails = sorted(p.name for p in runs_dir(cfg.name).glob("af-afdemo-tail-*"))
    idle = airflow(env, "dags", "test", "afdemo_incremental")
    assert "nothing new since the committed position" in idle.stdout + idle.stderr
    assert sorted(p.name for p in runs_dir(cfg.name).glob("af-afdemo-tail-*")) == tails
    assert read_latest(cfg)["scope"] == latest["scope"]

    # Upkeep through its DAG: small files compacted, every snapshot but the current expired, and the
    # proof still checks every offset from the archived batch audit.
    files_before = len(list(ensure_tables(cfg).data.scan().plan_files()))
    airflow(env, "dags", "test", "afdemo_maintenance")
    data = ensure_tables(cfg).data
    assert len(data.snapshots()) == 1
    assert len(list(data.scan().plan_files())) < files_before
    assert_exactly_once(cfg, high_watermarks(cfg))
    everything = validate(cfg, all_runs=True)
    assert everything["success"], everything["problems"]
    assert everything["offsets_checked"] == 4_000
