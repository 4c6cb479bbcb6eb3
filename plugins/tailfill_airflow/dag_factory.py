"""Build ``<pipeline>_backfill`` and ``<pipeline>_incremental`` DAGs from the pipeline YAMLs.

Parsing reads YAML and builds task objects only: no broker, no Spark, no pyspark import. Tasks
call the tailfill core at run time, with the pipeline's Kafka login from its Airflow connection
(:class:`~tailfill_airflow.hooks.TailfillHook`); Spark work goes through
:class:`~tailfill_airflow.operators.TailfillSubmitOperator` (the apache-spark provider's operator)
with the master of the ``spark_default`` connection.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, get_current_context, task

from tailfill.config import PipelineConfig, load_pipeline, pipelines_dir
from tailfill.errors import ConfigError
from tailfill_airflow.hooks import TailfillHook
from tailfill_airflow.operators import TailfillSubmitOperator, code_archive_path

log = logging.getLogger(__name__)
START = datetime(2026, 1, 1)
RETRIES = {"retries": 2, "retry_delay": timedelta(seconds=30), "retry_exponential_backoff": True}


def _run_id(prefix: str) -> str:
    """A file-name-safe run id derived from Airflow's run id (stable across task retries)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"af-{prefix}-{get_current_context()['run_id']}").strip("-")


def _preflight_task(cfg: PipelineConfig, mode: str):
    """The ``preflight`` task of a DAG: every check, then the code archive shipped to executors."""

    @task(task_id="preflight", **RETRIES)
    def preflight() -> list[str]:
        from tailfill.run.preflight import preflight as run_checks
        from tailfill.run.runtime import code_archive

        with TailfillHook(cfg).credentials_exported():
            passed = run_checks(cfg, mode)
        code_archive(code_archive_path())
        for line in passed:
            log.info("preflight ok: %s", line)
        return passed

    return preflight()


def _validate(cfg: PipelineConfig, run_id: str) -> dict:
    from tailfill.proof.validate import validate

    report = validate(cfg, run_id=run_id)
    log.info("validation of %s: %s (%s offsets) report %s", run_id,
             "complete" if report["success"] else "INCOMPLETE", report["offsets_checked"], report["paths"]["html"])
    if not report["success"]:
        raise RuntimeError("incomplete: " + "; ".join(report["problems"]))
    return {"run_id": run_id, "offsets": report["offsets_checked"], "report": report["paths"]["html"],
            "partitions": report["partitions"]}


def backfill_dag(cfg: PipelineConfig) -> DAG:
    """Manual, parameterised backfill of ``[from, to)``: preflight → plan → mapped spark-submit → validate."""
    slices = cfg.backfill.slices
    with DAG(
        dag_id=f"{cfg.name}_backfill",
        description=f"Backfill history of {cfg.source.topic} into {cfg.target.namespace}.{cfg.target.table}",
        schedule=None,
        start_date=START,
        catchup=False,
        tags=["tailfill", cfg.name, "backfill"],
        params={
            "from_offsets": Param("earliest", type="string", title="From",
                                  description='"earliest" or offsets JSON, e.g. {"topic": {"0": 0}}'),
            "to_offsets": Param("cutover", type="string", title="To",
                                description='"cutover" (where the tail begins) or offsets JSON'),
            "slices": Param(slices, type="integer", minimum=1, maximum=1024, title="Slices"),
            "max_parallel_slices": Param(min(2, slices), type="integer", minimum=1, maximum=64,
                                         title="Max parallel slices",
                                         description="spark-submit jobs running at once; slices beyond run in turn"),
            "committed_ranges": Param("skip", type="string", enum=["skip", "fail"], title="Already-committed ranges",
                                      description="skip: committed offsets are left alone (re-ingest is a no-op); "
                                                  "fail: stop if the requested range overlaps committed offsets"),
        },
        doc_md=__doc__,
    ) as dag:

        @task
        def plan() -> list[dict]:
            """The slices to run, planned once: each lane gets its slices' exact bounds."""
            from tailfill.offsets import PartitionOffsets, ranges_between, subtract
            from tailfill.run.plan import ensure_cutover, plan_backfill, source_state
            from tailfill.run.submit import JobSpec
            from tailfill.run.tuning import tuned_max_offsets

            params = get_current_context()["params"]
            with TailfillHook(cfg).credentials_exported():
                state = source_state(cfg)
                start = (state.marks.low if params["from_offsets"] == "earliest"
                         else PartitionOffsets.from_json(params["from_offsets"]))
                end = (ensure_cutover(state) if params["to_offsets"] == "cutover"
                       else PartitionOffsets.from_json(params["to_offsets"]))
            overlap = [r for r in ranges_between(start, end) if subtract([r], state.ledger.committed) != [r]]
            if overlap and params["committed_ranges"] == "fail":
                raise ValueError(f"requested range overlaps committed offsets in {', '.join(map(str, overlap))}")
            todo = plan_backfill(state, start, end, params["slices"])
            if not todo:
                log.info("nothing to backfill: every offset of the range is committed")
                return []
            lanes = min(params["max_parallel_slices"], len(todo))
            tuning = tuned_max_offsets(cfg, "backfill")
            log.info("max offsets per batch: %s (%s)", tuning.max_offsets_per_batch, tuning.reason)
            out = []
            for lane in range(lanes):  # each lane a block of adjacent slices: the job runs it as one query
                block = todo[lane * len(todo) // lanes:(lane + 1) * len(todo) // lanes]
                spec = JobSpec(str(cfg.path), "backfill", _run_id(f"{cfg.name}-backfill-lane{lane}"),
                               tuple(block), max_offsets_per_batch=tuning.max_offsets_per_batch)
                out.append({"run_id": spec.run_id, "slices": [s.index for s in spec.slices], "args": spec.argv()})
            return out

        @task(**RETRIES)
        def validate_slice(lane: dict) -> dict:
            return _validate(cfg, lane["run_id"]) | {"slices": lane["slices"]}

        @task(trigger_rule="none_failed")  # also when there was nothing to backfill (lanes skipped)
        def summary(results: list[dict]) -> dict:
            results = list(results)
            total = sum(r["offsets"] for r in results)
            for r in results:
                log.info("slices %s: run %s, %s offsets complete, report %s", r["slices"], r["run_id"],
                         r["offsets"], r["report"])
            log.info("backfill of %s: %s offsets in %s lanes, all complete", cfg.name, total, len(results))
            return {"offsets": total, "lanes": len(results)}

        lanes = plan()
        submit = TailfillSubmitOperator.partial(task_id="ingest_slice", pipeline=str(cfg.path),
                                                name=f"tailfill-{cfg.name}-backfill", **RETRIES).expand(
            application_args=lanes.map(lambda lane: lane["args"]))
        checked = validate_slice.expand(lane=lanes)
        _preflight_task(cfg, "backfill") >> lanes >> submit >> checked
        summary(checked)
    return dag


def incremental_dag(cfg: PipelineConfig) -> DAG:
    """Scheduled tail from the committed position: preflight → tune → spark-submit → validate → report."""
    with DAG(
        dag_id=f"{cfg.name}_incremental",
        description=f"Tail {cfg.source.topic} from its committed position into {cfg.target.table}",
        schedule=cfg.tail.schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tailfill", cfg.name, "incremental"],
        doc_md=__doc__,
    ) as dag:

        @task
        def tune() -> dict:
            from tailfill.run.submit import JobSpec
            from tailfill.run.tuning import tuned_max_offsets

            tuning = tuned_max_offsets(cfg, "tail")
            log.info("max offsets per batch: %s (%s)", tuning.max_offsets_per_batch, tuning.reason)
            spec = JobSpec(str(cfg.path), "tail", _run_id(f"{cfg.name}-tail"), once=True,
                           max_offsets_per_batch=tuning.max_offsets_per_batch)
            return {"run_id": spec.run_id, "tuning": tuning.to_dict(), "args": spec.argv()}

        @task(**RETRIES)
        def validate(tuned: dict) -> dict:
            return _validate(cfg, tuned["run_id"])

        @task
        def report(tuned: dict, checked: dict) -> dict:
            log.info("tail run %s: %s offsets validated; batch cap %s (%s); report %s", tuned["run_id"],
                     checked["offsets"], tuned["tuning"]["max_offsets_per_batch"], tuned["tuning"]["reason"],
                     checked["report"])
            return {"tuning": tuned["tuning"], **checked}

        tuned = tune()
        tail = TailfillSubmitOperator(task_id="tail", pipeline=str(cfg.path), name=f"tailfill-{cfg.name}-tail",
                                      application_args=tuned["args"], **RETRIES)
        checked = validate(tuned)
        _preflight_task(cfg, "tail") >> tuned >> tail >> checked
        report(tuned, checked)
    return dag


def maintenance_dag(cfg: PipelineConfig) -> DAG:
    """Scheduled table upkeep (``tailfill maintain``): compact, expire (batch audit archived), clean orphans."""
    assert cfg.maintenance is not None
    with DAG(
        dag_id=f"{cfg.name}_maintenance",
        description=f"Compact, expire snapshots and remove orphaned files of {cfg.target.namespace}.{cfg.target.table}",
        schedule=cfg.maintenance.schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tailfill", cfg.name, "maintenance"],
        doc_md=__doc__,
    ) as dag:

        @task(**RETRIES)
        def maintain() -> dict:
            """Runs beside the tail and backfills: conflicting commits are retried, never theirs failed."""
            from tailfill.run.maintain import maintain as run_upkeep
            from tailfill.run.maintain import maintenance_settings

            report = run_upkeep(cfg, maintenance_settings(cfg))
            for t in report["tables"]:
                log.info("%s: compaction %s, expiry %s, orphans %s", t["table"], t["compaction"], t["expiry"],
                         t["orphans"])
            return report

        maintain()
    return dag


def build_dags(folder: Path | None = None) -> dict[str, DAG]:
    """Both DAGs for every ``*.yaml`` in the pipelines folder; a broken file is logged, not fatal."""
    dags: dict[str, DAG] = {}
    for path in sorted((folder or pipelines_dir()).glob("*.yaml")):
        try:
            cfg = load_pipeline(path)
        except ConfigError as exc:
            log.error("skipping pipeline %s: %s", path, exc)
            continue
        for dag in (backfill_dag(cfg), incremental_dag(cfg), *([maintenance_dag(cfg)] if cfg.maintenance else [])):
            dags[dag.dag_id] = dag
    return dags
