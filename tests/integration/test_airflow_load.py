"""Two pipelines and their table upkeep at once on one Airflow and one catalog.

One local Airflow (:func:`airflow_server.local_airflow`: LocalExecutor, metadata on the session's
Postgres) runs two pipelines, ``load_a`` and ``load_b``, each on its own topic of the session broker,
whose tables share one Postgres catalog, one warehouse folder and one Spark Connect server. Both
backfills are triggered with two lanes each; after each pipeline's first :data:`PASS_BEFORE_HOLD` batches
every further batch of it holds before its commit (the ``before-commit`` failpoint, armed per pipeline),
so both backfills are running, each with committed batches and lanes holding prepared ones, when both
``<pipeline>_maintenance`` DAGs are triggered (compaction, snapshot expiry keeping the last 2, orphan
cleanup). Once both upkeep tasks have started the batches are let go: commits of four lanes and two
upkeeps go to the one catalog at once. Then more records are produced and both incremental DAGs run
side by side.

Every DAG run must end ``success`` (REST API); each table's audit must name only its own pipeline's
runs, each with the offsets it was planned; and each pipeline ends as every fault scenario does
(:func:`fault_outcomes.prove`: ``validate --all`` and a count of every offset).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from airflow_server import AirflowServer, local_airflow
from fault_outcomes import prove
from helpers import committed, tables_of, wait_until, write_demo_pipeline

from tailfill.config import PipelineConfig
from tailfill.dev.sample import produce_sample
from tailfill.lake.audit_log import all_batch_summaries, audit_log
from tailfill.lake.batch_summary import SUMMARY_PIPELINE, SUMMARY_RUN, BatchSummary
from tailfill.offsets import total
from tailfill.pipeline.load import load_pipeline
from tailfill.state.store import StateStore

pytestmark = [pytest.mark.integration, pytest.mark.faults]

NAMES = ("load_a", "load_b")
HISTORY, LIVE, PARTITIONS, BAD_EVERY = 4_000, 1_000, 4, 499
BATCH = 400  # offsets per backfill batch: five batches per lane
LANES = 2
PASS_BEFORE_HOLD = 2  # each pipeline's batches that commit before every further one of it holds at its commit
PARAMS = {"slices": LANES, "max_parallel_slices": LANES, "committed_ranges": "skip"}
KINDS = ("backfill", "maintenance", "incremental")


def dag(name: str, kind: str) -> str:
    return f"{name}_{kind}"


@pytest.fixture(scope="module")
def load_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("airflow-load")


@pytest.fixture(scope="module")
def pipelines(broker, load_dir, postgres) -> list[PipelineConfig]:
    """Both pipelines (the demo's, unscheduled), each with HISTORY records on its own topic, tables of their
    own in one Postgres catalog. Upkeep expires every snapshot older than a second beyond the last 2; its
    orphan cleanup keeps anything younger than an hour (a held batch's files are never old enough)."""
    folder = load_dir / "pipelines"
    folder.mkdir()
    catalog = f"iceberg_{uuid.uuid4().hex[:8]}"
    postgres.create_databases(catalog)
    cfgs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TAILFILL_HOME", str(load_dir / "home"))  # the YAML's ${TAILFILL_HOME} resolves as in Airflow
        for name in NAMES:
            path = write_demo_pipeline(
                folder / f"{name}.yaml", name, broker.bootstrap_servers, target__catalog__uri=postgres.url(catalog),
                target__table=f"{name}_events", backfill__max_offsets_per_batch=BATCH, backfill__batch_seconds=None,
                tail__schedule=None, maintenance__schedule=None, maintenance__expire_older_than="1s",
                maintenance__keep_last=2, maintenance__orphan_min_age="1h")
            cfg = load_pipeline(path)
            produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, HISTORY, PARTITIONS, bad_every=BAD_EVERY)
            cfgs.append(cfg)
        yield cfgs


@pytest.fixture(scope="module")
def airflow(pipelines, load_dir, postgres):
    # Five Spark slots: both backfills' lanes side by side, and one kept for an incremental run. Armed for a
    # pipeline, the before-commit failpoint lets its first PASS_BEFORE_HOLD batches through (in every Spark process).
    env = {"TAILFILL_SPARK_SLOTS": str(2 * LANES + 1), "TAILFILL_FAULT_SKIP": str(PASS_BEFORE_HOLD)}
    with local_airflow(load_dir, load_dir / "pipelines", postgres,
                       [dag(name, kind) for name in NAMES for kind in KINDS], env=env) as server:
        yield server


def task_state(airflow: AirflowServer, dag_id: str, run_id: str, task_id: str) -> str | None:
    return next((t["state"] for t in airflow.task_instances(dag_id, run_id) if t["task_id"] == task_id), None)


def backfills_holding_while_upkeep_starts(airflow: AirflowServer, pipelines: list[PipelineConfig]
                                          ) -> tuple[dict[str, str], dict[str, str]]:
    """Trigger both backfills; once each pipeline has committed its first :data:`PASS_BEFORE_HOLD` batches and
    holds the next before its commit, trigger both upkeeps; let the batches go when both upkeep tasks have
    started. The run ids: ``(backfills, upkeeps)`` by pipeline."""
    faults = Path(os.environ["TAILFILL_FAULT_DIR"])
    held = {name: faults / f"before-commit@{name}" for name in NAMES}  # the failpoint's marker: a batch holds
    for name in NAMES:
        for leftover in (held[name], faults / f"{held[name].name}.arrivals", faults / f"{held[name].name}.release"):
            leftover.unlink(missing_ok=True)
        (faults / f"pause-before-commit@{name}").touch()
    try:
        backfills = {name: airflow.trigger_dag(dag(name, "backfill"), PARAMS) for name in NAMES}
        for cfg in pipelines:
            wait_until(lambda cfg=cfg: held[cfg.name].exists() and committed(cfg) == PASS_BEFORE_HOLD * BATCH,
                       f"{cfg.name}'s first {PASS_BEFORE_HOLD} batches committed and the next held", timeout=900,
                       poll=1)
        # Each pipeline has 10 batches to commit and only PASS_BEFORE_HOLD went through: both runs are running.
        for name, run_id in backfills.items():
            assert airflow.dag_run(dag(name, "backfill"), run_id)["state"] == "running", \
                airflow.describe_run(dag(name, "backfill"), run_id)
        upkeeps = {name: airflow.trigger_dag(dag(name, "maintenance")) for name in NAMES}
        wait_until(lambda: all(task_state(airflow, dag(name, "maintenance"), run_id, "maintain")
                               in ("running", "success", "failed") for name, run_id in upkeeps.items()),
                   "both upkeep tasks to start", timeout=300, poll=1)
    finally:
        for name in NAMES:
            (faults / f"pause-before-commit@{name}").unlink(missing_ok=True)
            (faults / f"{held[name].name}.release").touch()
    return backfills, upkeeps


def run_offsets(cfg: PipelineConfig) -> dict[str, int]:
    """Offsets committed to the data table per Tailfill run id, from every batch summary (archived ones too);
    each summary must be of this pipeline."""
    data = tables_of(cfg).data
    summaries = all_batch_summaries(audit_log(StateStore.of(cfg), data), data)
    strangers = [s for s in summaries if s.get(SUMMARY_PIPELINE) != cfg.name]
    assert not strangers, f"{cfg.name}'s table has batches of another pipeline: {strangers[:3]}"
    out: dict[str, int] = {}
    for s in summaries:
        out[s[SUMMARY_RUN]] = out.get(s[SUMMARY_RUN], 0) + total(BatchSummary.from_properties(s).ranges)
    return out


def test_two_pipelines_backfill_while_their_tables_are_kept_up_then_both_tail(airflow, pipelines):
    backfills, upkeeps = backfills_holding_while_upkeep_starts(airflow, pipelines)
    for name in NAMES:
        airflow.wait_for_run(dag(name, "maintenance"), upkeeps[name], timeout=600)
    for name in NAMES:
        airflow.wait_for_run(dag(name, "backfill"), backfills[name], timeout=900)

    for cfg in pipelines:
        produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, LIVE, PARTITIONS, bad_every=BAD_EVERY)
    tails = {name: airflow.trigger_dag(dag(name, "incremental")) for name in NAMES}
    for name in NAMES:
        airflow.wait_for_run(dag(name, "incremental"), tails[name], timeout=600)

    # Every run of the six DAGs is one the test triggered, and it succeeded.
    triggered = {"backfill": backfills, "maintenance": upkeeps, "incremental": tails}
    for name in NAMES:
        for kind in KINDS:
            runs = {r["dag_run_id"]: r["state"] for r in airflow.dag_runs(dag(name, kind))}
            assert runs == {triggered[kind][name]: "success"}, (dag(name, kind), runs)

    upkept = {name: airflow.xcom(dag(name, "maintenance"), upkeeps[name], "maintain") for name in NAMES}
    for cfg in pipelines:
        name = cfg.name
        lanes = {lane["run_id"] for lane in airflow.xcom(dag(name, "backfill"), backfills[name], "plan")}
        tail_run = airflow.xcom(dag(name, "incremental"), tails[name], "tune")["run_id"]
        assert len(lanes) == LANES and all(r.startswith(f"af-{name}-backfill-lane") for r in lanes), lanes
        assert tail_run.startswith(f"af-{name}-tail-"), tail_run
        by_run = run_offsets(cfg)  # attributed by run id: the lanes carried the history, the tail the rest
        assert set(by_run) == lanes | {tail_run}, by_run
        assert sum(by_run[r] for r in lanes) == HISTORY and by_run[tail_run] == LIVE, by_run
        summary = airflow.xcom(dag(name, "backfill"), backfills[name], "summary")
        assert (summary["offsets"], summary["lanes"]) == (HISTORY, LANES), summary
        tables = upkept[name]["tables"]
        assert [t["table"] for t in tables] == [f"tailfill.{name}_events", f"tailfill.{name}_events_quarantine"], \
            tables
        # It found the batches committed before the hold: at least one file per Kafka partition each, compacted.
        assert tables[0]["compaction"]["files_removed"] >= PASS_BEFORE_HOLD * PARTITIONS, tables[0]
        retried = [t for t in airflow.task_instances(dag(name, "backfill"), backfills[name]) if t["try_number"] > 1]
        did = "; ".join(f"{t['table']}: {t['compaction']['files_removed']} files compacted, "
                        f"{t['expiry']['expired']} snapshots expired" for t in tables)
        prove(cfg, f"two pipelines and their upkeep on one Airflow and catalog ({name})",
              f"both pipelines' backfills ({LANES} lanes each, {HISTORY:,} offsets, batches of {BATCH}) with batches "
              "held before their commit while both maintenance DAGs started, then released; then both incremental "
              f"runs ({LIVE:,} offsets each); one Airflow, one Postgres catalog, one Spark Connect server",
              f"every DAG run succeeded; the table's batches are all this pipeline's runs (lanes {HISTORY:,}, tail "
              f"{LIVE:,} offsets); Airflow retried {len(retried)} of its backfill's tasks; upkeep beside the "
              f"lanes: {did}",
              summary["restarts"])
