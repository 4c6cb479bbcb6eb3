"""Build ``<pipeline>_backfill`` and ``<pipeline>_incremental`` DAGs from the pipeline YAMLs.

Parsing reads YAML and builds task objects only: no broker, no Spark, no pyspark import. Tasks
call the tailfill core at run time, with the pipeline's Kafka login from its Airflow connection
(:class:`~tailfill_airflow.hooks.TailfillHook`); Spark work goes through
:class:`~tailfill_airflow.operators.TailfillSubmitOperator` (the apache-spark provider's operator)
with the master of the ``spark_default`` connection, in the shared ``tailfill_spark`` pool.

Each validation task updates the pipeline's Iceberg table as an Airflow asset (offsets and rows of
the run in the event's extra); the DAG and task docs, the lanes' labels and the params' help are
written for the person running the pipeline, not for its developers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import DAG, Asset, AssetAlias, Param, get_current_context, task
from airflow.sdk.definitions.callback import AsyncCallback
from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

from tailfill.config import PipelineConfig
from tailfill.errors import ConfigError
from tailfill.pipeline.load import load_pipeline, pipeline_files, resolve_pipeline
from tailfill.run.backfill_inputs import FROM_KEYWORD, TO_KEYWORD, bound_pattern, check_backfill_conf
from tailfill.run.verdict import backfill_verdict
from tailfill.settings import settings
from tailfill.state.store import read_lane, run_reports
from tailfill.values.drift import describe, unknown_in
from tailfill_airflow.callbacks import deadline_missed, objective_missed, on_failure, on_retry
from tailfill_airflow.causes import causes_first, push_failure
from tailfill_airflow.handover import HANDED_OVER_LINE, hand_over, manual_run_waiting
from tailfill_airflow.hooks import TailfillHook
from tailfill_airflow.lag_history import measure_lag
from tailfill_airflow.lineage import emit_lineage, topic_assets
from tailfill_airflow.naming import (
    BACKFILL,
    INCREMENTAL,
    MAINTENANCE,
    REPLAYED_KEY,
    SPARK_POOL,
    backfill_lane_slots,
    dag_id,
    label_of_args,
    lane_entry,
    lanes_at_once,
    replayed_entry,
    tailfill_run_id,
)
from tailfill_airflow.operators import TailfillSubmitOperator, docs_url, replay_report_url, run_page_url
from tailfill_airflow.retry_label import keep_label_on_retry
from tailfill_airflow.routed_plans import plan_routed_lanes, tables_verdict, tune_routed

if TYPE_CHECKING:
    from tailfill.pipeline.handle import Pipeline

log = logging.getLogger(__name__)
keep_label_on_retry()  # in the task runner, which parses the DAG file before it runs a task of it
START = datetime(2026, 1, 1)
RETRIES = {"retries": 2, "retry_delay": timedelta(seconds=30), "retry_exponential_backoff": True}
DEFAULTS = {"on_failure_callback": on_failure, "on_retry_callback": on_retry}


def table_asset(cfg: PipelineConfig) -> Asset:
    """The pipeline's Iceberg table as an Airflow asset (one per catalog table, whichever DAG writes it)."""
    t = cfg.target
    return Asset(name=f"{t.namespace}.{t.table}", uri=f"iceberg://{t.catalog.name}/{t.namespace}/{t.table}",
                 group="iceberg")


def table_outlet(cfg: PipelineConfig) -> Asset | AssetAlias:
    """What a pipeline's validations update: its table's asset; of a pipeline with a table per topic, an alias
    whose events each name one table's asset (the tables are known when the tasks run, not when Airflow parses)."""
    return AssetAlias(name=f"tailfill.{cfg.name}.tables") if cfg.target.routed else table_asset(cfg)


def _opened(cfg: PipelineConfig) -> Pipeline:
    """The pipeline's handle, opened when a task runs (parsing the DAG file opens nothing)."""
    from tailfill.pipeline.handle import open_pipeline

    return open_pipeline(cfg)


def _airflow_run_id() -> str:
    return get_current_context()["run_id"]


def _preflight_task(cfg: PipelineConfig, mode: str):
    """The ``preflight`` task of a DAG: every check (the Spark tasks build the code archive they ship)."""

    @task(task_id="preflight", doc_md=PREFLIGHT_DOC, **RETRIES)
    def preflight() -> list[str]:
        from tailfill.run.preflight import preflight as run_checks
        from tailfill.run.preflight import preflight_tables

        with causes_first(f"preflight of {cfg.name} ({mode})"):
            if mode == "backfill":  # what a trigger's schema cannot refuse, refused before the broker is asked
                check_backfill_conf(get_current_context()["dag_run"].conf, _params(cfg))
        with causes_first(f"preflight of {cfg.name} ({mode})"), TailfillHook(cfg).credentials_exported():
            if cfg.target.routed:
                passed = preflight_tables(cfg, mode)
            else:
                with _opened(cfg) as pipeline:
                    passed = run_checks(pipeline, mode)
        for line in passed:
            log.info("preflight ok: %s", line)
        return passed

    return preflight()


def table_totals(pipeline: Pipeline) -> dict:
    """What the table holds now, for the asset event: its snapshot and the offsets its ledger has committed."""
    from tailfill.lake.ledger import read_ledger
    from tailfill.offsets import total

    tables = pipeline.open_tables()
    if tables is None:
        return {"snapshot_id": None, "table_offsets": 0}
    data = tables.data
    data.refresh()
    snapshot = data.current_snapshot()
    return {"snapshot_id": snapshot.snapshot_id if snapshot else None,
            "table_offsets": total(read_ledger(data).committed)}


def _validate(cfg: PipelineConfig, run_id: str, alias: AssetAlias | None = None) -> dict:
    """Validate one run; on success record an asset event with its offsets and rows (through ``alias`` for a
    table of a pipeline with a table per topic). Returns the XCom.

    The report and Data Docs are named by the plugin's URLs (under ``[api] base_url``), which any
    browser that reaches Airflow opens; the files behind them may be on this worker's disk only.
    """
    from tailfill.proof.validate import validate

    ti = get_current_context()["ti"]
    report = run_page_url("report", ti.dag_id, ti.run_id, ti.map_index)
    docs = docs_url(ti.dag_id, cfg.target.table if alias is not None else None)
    with _opened(cfg) as pipeline:
        result = validate(pipeline, run_id=run_id)
        totals = table_totals(pipeline)
        lane = read_lane(pipeline.state, run_id)  # the ingest's tries and restarts
        unknown = unknown_in(r.unknown_fields for r in run_reports(pipeline.state, run_id))
    verdict = "complete" if result.success else "INCOMPLETE"
    log.info("validation of %s: %s (%s offsets) report %s", run_id, verdict, result.offsets_checked, report)
    if unknown:
        log.warning("run %s: fields not declared (format.unknown_fields: %s): %s", run_id, cfg.format.unknown_fields,
                    describe(unknown))
    if not result.success:
        raise RuntimeError(f"run {run_id} of {cfg.name} is incomplete: " + "; ".join(result.problems)
                           + f" (fix: see the completeness report {report})")
    summary = {"run_id": run_id, "offsets": result.offsets_checked, "rows": result.rows,
               "quarantined": result.quarantined, "report": report, "data_docs": docs, **totals}
    if result.state:  # a keyed table: what the run's merges did, and the state's key
        summary |= {"key": list(cfg.target.key), "changes": result.state["run_counts"]}
    events = get_current_context()["outlet_events"]
    if alias is None:
        events[table_asset(cfg)].extra = {"pipeline": cfg.name, **summary}
    else:
        events[alias].add(table_asset(cfg), extra={"pipeline": cfg.name, "table": cfg.target.table, **summary})
    emit_lineage(cfg, result.rows, result.quarantined, get_current_context()["task"])
    return summary | {"verdict": "COMPLETE", "ranges": result.covered(), "partitions": result.partitions,
                      "restarts": len(lane.restarts) if lane else 0,
                      "ingest_tries": lane.try_number if lane and lane.try_number else 1,
                      "unknown_fields": unknown}


def replay_proof(cfg: PipelineConfig, replay_run_id: str, report: str) -> dict:
    """The proof of a backfill's replay of committed offsets: exactly the replayed offsets validated as a run's are
    (each once, in one table; the data expectations over their new rows). Returns the ``replay`` of the ``summary``
    XCom (``report``: the completeness report's URL), its ``verdict`` ``COMPLETE`` or ``INCOMPLETE`` with the
    ``problems``."""
    from tailfill.proof.validate import validate

    with _opened(cfg) as pipeline:
        result = validate(pipeline, run_id=replay_run_id)
    log.info("validation of replay %s: %s (%s offsets) report %s", replay_run_id,
             "complete" if result.success else "INCOMPLETE", f"{result.offsets_checked:,}", report)
    return {"run_id": replay_run_id, "verdict": "COMPLETE" if result.success else "INCOMPLETE",
            "offsets": result.offsets_checked, "rows": result.rows, "quarantined": result.quarantined,
            "ranges": result.covered(), "report": report,
            **({} if result.success else {"problems": list(result.problems)})}


def validate_replay(cfg: PipelineConfig, replay_run_id: str, report: str) -> dict:
    """:func:`replay_proof`, failing naming what is wrong when the replay is not complete."""
    proof = replay_proof(cfg, replay_run_id, report)
    if proof["verdict"] != "COMPLETE":
        raise RuntimeError(f"replay {replay_run_id} of {cfg.name} is incomplete: " + "; ".join(proof["problems"])
                           + f" (fix: see the completeness report {report})")
    return proof


def merged_ranges(results: list[dict]) -> dict:
    """The ``ranges`` of several validations (``{"topic": {"0": [[s, e]]}}``), merged per partition."""
    from tailfill.offsets import OffsetRange, merge, ranges_to_dict

    return ranges_to_dict(merge(OffsetRange(topic, int(part), start, end) for r in results
                                for topic, parts in r.get("ranges", {}).items()
                                for part, spans in parts.items() for start, end in spans))


# --- the planning tasks: thin adapters of tailfill.run.planner -----------------------------------


def plan_lanes(cfg: PipelineConfig, params: Mapping[str, Any], airflow_run_id: str,
               on_replayed: Callable[[dict], None] = lambda _: None) -> list[dict]:
    """The backfill DAG's ``plan`` task: the form's ``params`` planned as ``tailfill backfill`` plans its flags.

    One XCom entry per lane: its run id, label, slice indexes and the job's arguments. A replay of the range's
    committed offsets (*Already-committed ranges* ``replay``) is run here and what it did handed to
    ``on_replayed`` (the ``replayed`` XCom, which the ``summary`` task's verdict counts).
    """
    from tailfill.run.planner import BackfillRequest, plan_backfill_lanes

    with TailfillHook(cfg).credentials_exported(), _opened(cfg) as pipeline:
        request = BackfillRequest.from_params(params)
        plan = plan_backfill_lanes(pipeline, request,
                                   lambda lane: tailfill_run_id(cfg.name, BACKFILL, airflow_run_id, lane))
        from tailfill.run.replay import replay_committed_first

        replayed = replay_committed_first(pipeline, request.on_committed, plan, log.info)  # here: no Spark job
    if replayed is not None:
        on_replayed(replayed_entry(replayed))
    for line in plan.lines:
        (log.warning if line.startswith("warning:") else log.info)(line)
    log.info(lanes_at_once(len(plan.specs)))
    out = []
    for lane, spec in enumerate(plan.specs):
        out.append(lane_entry(spec))
        log.info("lane %s: %s", lane, out[-1]["label"])
    return out


def tune_tail(cfg: PipelineConfig, airflow_run_id: str) -> dict | None:
    """The incremental DAG's ``tune`` task: the tail planned as ``tailfill tail --once`` plans it; None
    (downstream skipped) when nothing is waiting."""
    from tailfill.run.planner import TailRequest, plan_tail

    with TailfillHook(cfg).credentials_exported(), _opened(cfg) as pipeline:
        plan = plan_tail(pipeline, TailRequest(once=True), tailfill_run_id(cfg.name, INCREMENTAL, airflow_run_id))
    for note in plan.notes:
        log.info(note)
    log.info("tail position %s, broker end %s: %s offsets waiting", plan.start.to_dict(), plan.high.to_dict(),
             f"{plan.pending:,}")
    if not plan.pending:
        log.info("nothing new since the committed position: skipping Spark and validation")
        return None
    log.info("max offsets per batch: %s (%s)", plan.tuning.max_offsets_per_batch, plan.tuning.reason)
    return {"run_id": plan.spec.run_id, "tuning": plan.tuning.to_dict(), "args": plan.spec.argv(),
            "pending": plan.pending}


def objective_of_run(cfg: PipelineConfig, tail_run_id: str) -> dict:
    """The tail run's batches against the freshness objective, a miss with the cause the run measured (restarts,
    tries, batch times). Returns the report's ``objective`` XCom; its ``summary`` is the line the ``objective``
    task fails or warns with."""
    from tailfill_airflow.objective import check_objective

    state = _opened(cfg).state
    lane = read_lane(state, tail_run_id)  # the tail's tries and its query's restarts
    check = check_objective(cfg.tail.freshness_seconds, run_reports(state, tail_run_id),
                            lane.restarts if lane else (), (lane.try_number or 1) if lane else 1)
    line = check.asstr()
    (log.info if check.met else log.warning)("%s", line)
    return check.asdict() | {"summary": line}


def enforce_objective(cfg: PipelineConfig, checks: Mapping[str, dict]) -> dict:
    """The incremental DAG's ``objective`` task, after ``report``: a missed objective (``checks``: the report's
    objective by table, ``""`` for a pipeline's one table) fails the task in one line with its cause and fix
    (``tail.on_missed_objective: fail``; the failure callback records and alerts it), or is recorded as a warning
    and alerted while the run succeeds (``warn``)."""
    from airflow.sdk.exceptions import AirflowFailException

    missed = [f"table {table}: {check['summary']}" if table else check["summary"]
              for table, check in checks.items() if not check["met"]]
    if not missed:
        log.info("freshness objective met by every table's batches" if len(checks) > 1 else
                 next(iter(checks.values()), {}).get("summary", "freshness objective: nothing measured"))
        return {"met": True, "missed": []}
    line = "; ".join(missed)
    if cfg.tail.on_missed_objective == "fail":  # the fix is in the line: the failure XCom names none apart
        push_failure(get_current_context()["ti"], f"the freshness objective of {cfg.name}", "ObjectiveMissed", line,
                     None, retryable=False)
        raise AirflowFailException(line)
    objective_missed(get_current_context(), line)
    return {"met": False, "missed": missed}


# --- user-facing docs ---------------------------------------------------------------------------

PREFLIGHT_DOC = """Checks the broker, topic, catalog, warehouse, Spark and disk before any Spark work.
A failure names the check and its fix."""
PLAN_DOC = """Reads the broker's offsets and the table's ledger, records the cutover when there is none
yet, and deals the uncommitted offsets of the requested range into slices and lanes. Its XCom lists
each lane's slices and exact bounds; the log shows earliest, cutover, committed and what the run covers.
With *Already-committed ranges* `replay`, it first re-reads the committed offsets of the range with the
pipeline as it is now and replaces their rows, batch by batch (as `tailfill replay`), logging each batch."""
INGEST_DOC = """One `spark-submit` per lane, running the lane's slices in capped micro-batches, each
committed atomically with its offset ranges. **Progress**: the lane's label in the grid, the
`progress` XCom and the *Tailfill* tab of this task (offsets done/planned, rows/s, ETA). **Links**:
completeness report, progress and batch reports, Data Docs, Spark job output. A failure's error starts
with the cause and the fix, then what was committed; clearing the task resumes where it stopped."""
VALIDATE_DOC = """Proves the lane landed every offset exactly once (Great Expectations on exact offset
counts) and updates the table's asset with the run's offsets and rows. Fails naming missing or
duplicated ranges."""
SUMMARY_DOC = """Totals of the run over all lanes: offsets, rows, quarantined, and each lane's report."""
TUNE_DOC = """Finds how many offsets are waiting after the committed position and sizes the batch
cap from measured throughput. With nothing waiting, the run stops here (no Spark) and the
downstream tasks are skipped. A scheduled run with a run triggered by hand waiting behind it (as after
*unpause* on trigger) leaves the work to that run and stops here too, saying so."""
TAIL_DOC = """`spark-submit` of the tail from the committed position to the broker's current end, in
capped micro-batches. Progress, links and failure causes as for a backfill lane."""
REPORT_DOC = """The run's summary: offsets, rows, batch cap and why, the completeness report, the lag, and the
freshness objective of its batches (met, or missed with the cause the run measured and its fix)."""
OBJECTIVE_DOC = """The freshness objective's verdict, after the report has landed: a run whose batches missed it
fails here, in one line naming the measured cause (outage, slow batch, backlog or schedule) and its fix, and the
alerting hook is called; with `tail.on_missed_objective: warn` it is a warning (recorded, on the run's tab, sent
to the alerting hook) and the run succeeds."""


def _into(cfg: PipelineConfig) -> str:
    """Where a pipeline writes, for its DAGs' docs."""
    if cfg.target.routed:
        return f"a table per topic (`{cfg.target.namespace}.{cfg.target.table}`)"
    return f"`{cfg.target.namespace}.{cfg.target.table}`"


ROUTED_DOC = """
**A table per topic**: each run finds the topics on the broker and their tables when it runs; each table has
its own cutover, ledger and proof, its lanes or tail are their own tasks (labelled with the table), a table that
fails does not hold the others back, and the last task gives the verdict table by table. Each validated table
updates its own asset (through the pipeline's asset alias).
"""


def _backfill_doc(cfg: PipelineConfig) -> str:
    return f"""### Backfill of `{cfg.source.subscription}` into {_into(cfg)}

Loads the topic's history — by default from the earliest offset to the **cutover**, where the
incremental DAG (`{dag_id(cfg.name, INCREMENTAL)}`) begins — exactly once, in slices run by parallel
lanes. Offsets already committed are skipped, so re-running is safe.

**Run it**: *Trigger* → adjust the parameters → *Trigger*. The *Tailfill* tab of a run shows every
lane's progress; each lane's extra links lead to its completeness report and Data Docs. The form's
*Logical Date* is Airflow's own field, which its trigger form shows for every DAG: leave it as it is,
Tailfill ignores it (the offsets *From* and *To* say what a run covers).

**Capacity**: lanes run in the `{SPARK_POOL}` pool and at most {backfill_lane_slots()} at a time, so the
incremental DAG always finds a slot. **Proof**: each lane is validated; the table's asset is updated
with the offsets and rows of each validated lane.
""" + (ROUTED_DOC if cfg.target.routed else "")


def _incremental_doc(cfg: PipelineConfig) -> str:
    return f"""### Incremental tail of `{cfg.source.subscription}` into {_into(cfg)}

Each run ingests what arrived after the committed position (from the cutover on), validates it,
and updates the table's asset. Schedule: `{cfg.tail.schedule}`. A run with nothing new stops after
`tune` without starting Spark. History before the cutover is `{dag_id(cfg.name, BACKFILL)}`'s job;
Airflow's date-range backfill is disabled here (offsets, not dates, define what a run covers).
{_deadline_doc(cfg)}
""" + (ROUTED_DOC if cfg.target.routed else "")


def _deadline_doc(cfg: PipelineConfig) -> str:
    if cfg.tail.run_deadline_seconds is None:
        return "**Deadline**: none (set `tail.run_deadline_seconds` in the pipeline to be alerted of slow runs)."
    return (f"**Deadline**: a run not finished {cfg.tail.run_deadline_seconds:g}s after it was queued is recorded "
            "as a missed deadline and sent to the alerting hook.")


def _params(cfg: PipelineConfig) -> dict[str, Param]:
    slices, lanes = cfg.backfill.slices, backfill_lane_slots()
    status = f"[the pipeline's live offsets](/tailfill/pipeline/{dag_id(cfg.name, BACKFILL)})"
    topic = cfg.source.topic or (cfg.source.topics or ["a_topic"])[0]  # for the examples
    return {
        "from_offsets": Param(
            FROM_KEYWORD, type="string", pattern=bound_pattern(FROM_KEYWORD), title="From",
            description_md=f'Where the backfill starts: `{FROM_KEYWORD}` (the oldest offset the broker still holds) '
                           f'or offsets as JSON, e.g. `{{"{topic}": {{"0": 1000, "1": 1000}}}}`; anything else is '
                           f'refused when you trigger. Earliest offsets per partition: {status}.'),
        "to_offsets": Param(
            TO_KEYWORD, type="string", pattern=bound_pattern(TO_KEYWORD), title="To (exclusive)",
            description_md=f'Where it ends: `{TO_KEYWORD}` (where the tail begins; recorded at the broker\'s current '
                           f'end by the first run) or offsets JSON like `{{"{topic}": {{"0": 5000}}}}`; a To before '
                           f'From fails the run at its first task. Cutover, committed offsets and what a run would '
                           f'cover: {status}.'),
        "slices": Param(
            slices, type="integer", minimum=1, maximum=1024, title="Slices",
            description_md=f"How many pieces the range is cut into (per partition, equal offset counts). More slices "
                           f"give finer restarts and progress; lanes run adjacent slices as one Spark job. "
                           f"Pipeline default: {slices}."),
        "max_parallel_slices": Param(
            min(lanes, slices), type="integer", minimum=1, maximum=64, title=f"Lanes (Spark jobs; {lanes} at once)",
            description_md=f"How many `spark-submit` jobs share the slices. Each is one mapped `ingest_slice` task. "
                           f"**{lanes} run at once**: the pool `{SPARK_POOL}` has {lanes + 1} slots and keeps one "
                           f"for the incremental DAG; lanes beyond {lanes} wait for a slot. The `plan` task's log "
                           f"says what this run will run in parallel."),
        "max_offsets_per_second": Param(
            cfg.backfill.max_offsets_per_second, type=["null", "integer"], minimum=1, title="Rate limit (offsets/s)",
            description_md="At most this many offsets per second per lane (empty: no limit). Whatever the limit, "
                           "a lane runs on half the cores beside a live tail and pauses while the tail misses "
                           f"its freshness objective (p95 ≤ {cfg.tail.freshness_seconds:g}s). Pipeline default: "
                           f"{cfg.backfill.max_offsets_per_second or 'no limit'}."),
        "committed_ranges": Param(
            "skip", type="string", enum=["skip", "fail", "replay"], title="Already-committed ranges",
            description_md="`skip`: committed offsets are left alone (re-running is a no-op for them); "
                           "`fail`: stop if the requested range overlaps committed offsets; `replay`: the `plan` "
                           "task re-reads the committed offsets of the range with the pipeline as it is now and "
                           "replaces their rows (as `tailfill replay`; e.g. after a field was added), then the "
                           "lanes backfill the rest."),
        **({"topics": Param(
            "", type="string", title="Topics",
            description_md=f"Backfill only these topics, separated by commas (empty: every topic of "
                           f"{cfg.source.described}).")} if cfg.source.several else {}),
    }


# --- the DAGs --------------------------------------------------------------------------------------


def _manual_dag(cfg: PipelineConfig) -> DAG:
    """The backfill DAG of a pipeline: manual, with the params form."""
    return DAG(
        dag_id=dag_id(cfg.name, BACKFILL),
        description=f"Backfill history of {cfg.source.subscription} into {cfg.target.namespace}.{cfg.target.table}",
        schedule=None,
        start_date=START,
        catchup=False,
        tags=["tailfill", cfg.name, "backfill"],
        params=_params(cfg),
        doc_md=_backfill_doc(cfg),
        default_args=DEFAULTS,
        user_defined_macros={"lane_label_of": label_of_args},
    )


def _lane_jobs(cfg: PipelineConfig, lanes: Any) -> Any:
    """The backfill's mapped ``ingest_slice`` tasks: one job per lane of the ``plan`` task's XCom."""
    return TailfillSubmitOperator.partial(
        task_id="ingest_slice", pipeline=str(cfg.path), name=f"tailfill-{cfg.name}-backfill", doc_md=INGEST_DOC,
        inlets=topic_assets(cfg), pool=SPARK_POOL, max_active_tis_per_dag=backfill_lane_slots(),
        map_index_template="{{ lane_label_of(task.application_args) }}", **RETRIES,
    ).expand(application_args=lanes.map(lambda lane: lane["args"]))


def backfill_dag(cfg: PipelineConfig) -> DAG:
    """Manual, parameterised backfill of ``[from, to)``: preflight → plan → mapped spark-submit → validate."""
    with _manual_dag(cfg) as dag:

        @task(doc_md=PLAN_DOC)
        def plan() -> list[dict]:
            """The slices to run, planned once: each lane gets its slices' exact bounds."""
            context = get_current_context()
            with causes_first(f"planning the backfill of {cfg.name}"):
                return plan_lanes(cfg, context["params"], _airflow_run_id(),
                                  lambda replayed: context["ti"].xcom_push(REPLAYED_KEY, replayed))

        # The lane's label from its argument, rendered before the task runs: shown while it runs and if it fails.
        @task(doc_md=VALIDATE_DOC, outlets=[table_asset(cfg)],
              map_index_template="{{ task.op_kwargs['lane']['label'] }}", **RETRIES)
        def validate_slice(lane: dict) -> dict:
            return _validate(cfg, lane["run_id"]) | {"slices": lane["slices"], "label": lane["label"]}

        @task(trigger_rule="none_failed", doc_md=SUMMARY_DOC)  # also when nothing was to backfill
        def summary(results: list[dict]) -> dict:
            # One slice of the mapped XComs: iterating Airflow's lazy sequence ends on a lookup past its
            # end, which the task runner logs as "[error] XCom not found" after every good backfill.
            results = list(results[:])
            for r in results:
                log.info("%s: run %s, %s offsets (%s rows, %s quarantined) complete, report %s", r["label"],
                         r["run_id"], f"{r['offsets']:,}", f"{r['rows']:,}", f"{r['quarantined']:,}", r["report"])
            ti = get_current_context()["ti"]
            replayed = ti.xcom_pull(task_ids="plan", key=REPLAYED_KEY) or {}
            proof = validate_replay(cfg, replayed["run_id"], replay_report_url(ti.dag_id, ti.run_id)) \
                if replayed else None
            offsets = sum(r["offsets"] for r in results)
            verdict = backfill_verdict(len(results), offsets, replayed.get("offsets", 0))
            out = {"verdict": verdict.code, "headline": verdict.headline, "offsets": offsets,
                   "replayed": replayed.get("offsets", 0), "lanes": len(results),
                   "rows": sum(r["rows"] for r in results),
                   "quarantined": sum(r["quarantined"] for r in results), "ranges": merged_ranges(results),
                   "restarts": sum(r.get("restarts", 0) for r in results),
                   "unknown_fields": unknown_in(r.get("unknown_fields", {}) for r in results),
                   **({"replay": proof} if proof else {})}
            if out["unknown_fields"]:
                log.warning("fields not declared (format.unknown_fields: %s): %s", cfg.format.unknown_fields,
                            describe(out["unknown_fields"]))
            log.info("backfill of %s: %s offsets in %s lanes: %s", cfg.name, f"{out['offsets']:,}", out["lanes"],
                     verdict.headline)
            return out

        lanes = plan()
        submit = _lane_jobs(cfg, lanes)
        checked = validate_slice.expand(lane=lanes)
        _preflight_task(cfg, "backfill") >> lanes >> submit >> checked
        summary(checked)
    return dag


def run_deadline(seconds: float | None) -> DeadlineAlert | None:
    """The incremental DAG's deadline alert (``tail.run_deadline_seconds``; None: none): a run not finished
    that long after it was queued is recorded by ``deadline_missed`` and sent to the alerting hook."""
    if seconds is None:
        return None
    return DeadlineAlert(reference=DeadlineReference.DAGRUN_QUEUED_AT, interval=timedelta(seconds=seconds),
                         callback=AsyncCallback(deadline_missed, kwargs={"interval_seconds": seconds}))


def _scheduled_dag(cfg: PipelineConfig, kind: str, schedule: str | None, doc_md: str, description: str,
                   deadline: DeadlineAlert | None = None) -> DAG:
    """A scheduled DAG of a pipeline: one run at a time, no catch-up, no date-range backfill.

    Paused when Airflow first sees it, whatever ``dags_are_paused_at_creation`` says: its first run
    would record the cutover (the tail's start) before the user chose anything.
    """
    return DAG(
        dag_id=dag_id(cfg.name, kind),
        description=description,
        schedule=schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tailfill", cfg.name, kind],
        doc_md=doc_md,
        default_args=DEFAULTS,
        allowed_run_types=["scheduled", "manual"],  # not Airflow's date-range backfill: offsets define a run
        deadline=deadline,
        is_paused_upon_creation=True,
        user_defined_macros={"lane_label_of": label_of_args},
    )


def incremental_dag(cfg: PipelineConfig) -> DAG:
    """Scheduled tail from the committed position: preflight → tune → spark-submit → validate → report."""
    with _scheduled_dag(cfg, INCREMENTAL, cfg.tail.schedule, _incremental_doc(cfg),
                        f"Tail {cfg.source.subscription} from its committed position into {cfg.target.table}",
                        run_deadline(cfg.tail.run_deadline_seconds)) as dag:

        @task.short_circuit(doc_md=TUNE_DOC, multiple_outputs=True)  # downstream reads tuned["args"]
        def tune() -> dict | None:
            context = get_current_context()
            if manual_run_waiting(context["dag_run"]):  # unpaused on trigger: the run asked for does the work
                log.info("handed over: %s", HANDED_OVER_LINE)
                hand_over(context["ti"])
                return None
            with causes_first(f"planning the tail of {cfg.name}"):
                return tune_tail(cfg, _airflow_run_id())

        @task(doc_md=VALIDATE_DOC, outlets=[table_asset(cfg)], **RETRIES)
        def validate(tuned: dict) -> dict:
            return _validate(cfg, tuned["run_id"])

        @task(doc_md=REPORT_DOC)
        def report(tuned: dict, checked: dict) -> dict:
            from tailfill.run.tail_health import describe, read_tail

            health, unknown = read_tail(_opened(cfg).state)  # the tail's last batch: freshness, and whether it keeps up
            lines = describe(cfg, health, unknown=unknown)
            for line in lines:
                (log.warning if line.startswith("WARNING") else log.info)(line)
            freshness = health.freshness.to_dict() if health and health.freshness else None
            log.info("tail run %s: %s offsets validated (%s rows, %s quarantined); batch cap %s (%s); report %s",
                     tuned["run_id"], f"{checked['offsets']:,}", f"{checked['rows']:,}",
                     f"{checked['quarantined']:,}", tuned["tuning"]["max_offsets_per_batch"],
                     tuned["tuning"]["reason"], checked["report"])
            with TailfillHook(cfg).credentials_exported(), _opened(cfg) as pipeline:
                lag = measure_lag(pipeline)  # the tail's lag at this run's end: the pages draw it over runs
            if lag["behind"] is None:
                log.warning("offsets behind at the end of the run: unknown (%s)", lag.get("unknown", "no cutover"))
            else:
                log.info("offsets behind at the end of the run: %s", f"{lag['behind']:,}")
            objective = objective_of_run(cfg, tuned["run_id"])
            return {"tuning": tuned["tuning"], **checked, "freshness": freshness,
                    "freshness_objective_seconds": cfg.tail.freshness_seconds, "objective": objective,
                    "tail_health": lines, "lag": lag}

        @task(task_id="objective", doc_md=OBJECTIVE_DOC)
        def objective(reported: dict) -> dict:
            return enforce_objective(cfg, {"": reported["objective"]})

        tuned = tune()
        tail = TailfillSubmitOperator(task_id="tail", pipeline=str(cfg.path), name=f"tailfill-{cfg.name}-tail",
                                      inlets=topic_assets(cfg),
                                      application_args=tuned["args"], planned_offsets=tuned["pending"],
                                      doc_md=TAIL_DOC, pool=SPARK_POOL, **RETRIES)
        checked = validate(tuned)
        _preflight_task(cfg, "tail") >> tuned >> tail >> checked
        objective(report(tuned, checked))
    return dag


# --- a pipeline with a table per topic: its tables found when the tasks run --------------------------

UNPLANNED_KEY = "unplanned_tables"  # the planning task's XCom of the tables it could not plan, with why
TABLES_DOC = """The run's verdict table by table: COMPLETE when every run of the table was validated complete,
REPLAYED when a backfill only replayed the table's committed offsets (the replay validated here); a table that could
not start, or whose validation failed, is named (and fails this task); the others' rows and assets stand."""


def _planned(task_id: str) -> tuple[list[dict], dict[str, str]]:
    """What the run's planning task planned, and the tables it could not plan. Fails when it planned nothing
    (it failed, or a task before it did): this task runs whatever came before, and as the run's last task its
    state is the run's."""
    ti = get_current_context()["ti"]
    runs = ti.xcom_pull(task_ids=task_id)
    if runs is None:
        raise RuntimeError(f"the {task_id} task did not plan the run's tables: the task that failed before this "
                           "one has the cause")
    return runs, ti.xcom_pull(task_ids=task_id, key=UNPLANNED_KEY) or {}


def routed_backfill_dag(cfg: PipelineConfig) -> DAG:
    """The backfill of a pipeline with a table per topic: preflight of every table → plan (the form's lanes dealt
    across the tables) → mapped spark-submit → validate each lane (an asset event per table) → a verdict per table."""
    alias = table_outlet(cfg)
    with _manual_dag(cfg) as dag:

        @task(doc_md=PLAN_DOC)
        def plan() -> list[dict]:
            context = get_current_context()
            with causes_first(f"planning the backfill of {cfg.name}"):
                lanes, unplanned = plan_routed_lanes(cfg, context["params"], _airflow_run_id(),
                                                     lambda replays: context["ti"].xcom_push(REPLAYED_KEY, replays))
            context["ti"].xcom_push(key=UNPLANNED_KEY, value=unplanned)
            return lanes

        @task(doc_md=VALIDATE_DOC, outlets=[alias], map_index_template="{{ task.op_kwargs['lane']['label'] }}",
              **RETRIES)
        def validate_slice(lane: dict) -> dict:
            return _validate(resolve_pipeline(lane["pipeline"]), lane["run_id"], alias) | {
                "slices": lane["slices"], "label": lane["label"], "table": lane["table"]}

        @task(trigger_rule="all_done", doc_md=TABLES_DOC)
        def summary() -> dict:
            ti = get_current_context()["ti"]
            runs, unplanned = _planned("plan")
            replays = ti.xcom_pull(task_ids="plan", key=REPLAYED_KEY) or {}
            proofs = {table: replay_proof(resolve_pipeline(r["pipeline"]), r["run_id"], replay_report_url(
                ti.dag_id, ti.run_id, table)) for table, r in replays.items()}
            out = tables_verdict(f"backfill of {cfg.name}", runs, unplanned, proofs)
            verdict = backfill_verdict(len(runs), out["offsets"], out["replayed"])
            log.info("backfill of %s: %s", cfg.name, verdict.headline)
            return out | {"verdict": verdict.code, "headline": verdict.headline}

        lanes = plan()
        checked = validate_slice.expand(lane=lanes)
        _preflight_task(cfg, "backfill") >> lanes >> _lane_jobs(cfg, lanes) >> checked >> summary()
    return dag


def routed_incremental_dag(cfg: PipelineConfig) -> DAG:
    """The scheduled tail of a pipeline with a table per topic: preflight → tune every table (a new one starts at
    its earliest offsets) → a mapped spark-submit per table with offsets waiting → validate each (every table
    whatever the others did) → a verdict per table."""
    alias = table_outlet(cfg)
    with _scheduled_dag(cfg, INCREMENTAL, cfg.tail.schedule, _incremental_doc(cfg),
                        f"Tail {cfg.source.subscription} from its committed positions into a table per topic",
                        run_deadline(cfg.tail.run_deadline_seconds)) as dag:

        @task(doc_md=TUNE_DOC)
        def tune() -> list[dict]:
            with causes_first(f"planning the tail of {cfg.name}"):
                tails, unplanned = tune_routed(cfg, _airflow_run_id())
            get_current_context()["ti"].xcom_push(key=UNPLANNED_KEY, value=unplanned)
            return tails

        @task(doc_md=VALIDATE_DOC, outlets=[alias], trigger_rule="all_done",
              map_index_template="{{ task.op_kwargs['tuned']['table'] }}", **RETRIES)
        def validate(tuned: dict) -> dict:
            return _validate(resolve_pipeline(tuned["pipeline"]), tuned["run_id"], alias) | {"table": tuned["table"]}

        @task(trigger_rule="all_done", doc_md=TABLES_DOC)
        def report() -> dict:
            tails, unplanned = _planned("tune")
            out = tables_verdict(f"tail of {cfg.name}", tails, unplanned)
            return out | {"objectives": {t["table"]: objective_of_run(resolve_pipeline(t["pipeline"]), t["run_id"])
                                         for t in tails}}

        @task(task_id="objective", doc_md=OBJECTIVE_DOC)
        def objective(reported: dict) -> dict:
            return enforce_objective(cfg, reported["objectives"])

        tuned = tune()
        tail = TailfillSubmitOperator.partial(
            task_id="tail", pipeline=str(cfg.path), name=f"tailfill-{cfg.name}-tail", doc_md=TAIL_DOC, pool=SPARK_POOL,
            inlets=topic_assets(cfg), map_index_template="{{ lane_label_of(task.application_args) }}", **RETRIES,
        ).expand_kwargs(tuned.map(lambda t: {"application_args": t["args"], "planned_offsets": t["pending"]}))
        reported = report()
        _preflight_task(cfg, "tail") >> tuned >> tail >> validate.expand(tuned=tuned) >> reported
        objective(reported)
    return dag


def maintenance_dag(cfg: PipelineConfig) -> DAG:
    """Scheduled table upkeep (``tailfill maintain``): compact, expire (batch audit archived), clean orphans."""
    assert cfg.maintenance is not None
    table = f"{cfg.target.namespace}.{cfg.target.table}"
    doc = (f"### Upkeep of `{table}`\n\nOn `{cfg.maintenance.schedule}`: compacts small data files into files of "
           f"about {cfg.maintenance.target_file_bytes:,} bytes, archives the per-batch audit of old snapshots and "
           f"expires them (keeping the last {cfg.maintenance.keep_last}), and removes files no snapshot references "
           f"that are older than {cfg.maintenance.orphan_min_age}. It runs beside the tail and backfills; "
           "`validate --all` still checks every offset afterwards. Same as `tailfill maintain` on the command line.")
    with _scheduled_dag(cfg, MAINTENANCE, cfg.maintenance.schedule, doc,
                        f"Compact, expire snapshots and remove orphaned files of {table}") as dag:

        @task(**RETRIES)
        def maintain() -> dict:
            """Runs beside the tail and backfills: conflicting commits are retried, never theirs failed."""
            from tailfill.run.maintain import maintain as run_upkeep
            from tailfill.run.maintain import maintenance_settings

            if cfg.target.routed:
                from tailfill.run.routed import known_routes

                tables = {}
                for route in known_routes(cfg):
                    with _opened(route.cfg) as pipeline:
                        done = run_upkeep(pipeline, maintenance_settings(route.cfg))
                    log.info("table %s: %s", route.table, done.asstr())
                    tables[route.table] = done.asdict() | {"summary": done.asstr()}
                text = "\n".join(f"table {t}: {v['summary']}" for t, v in tables.items()) or "no table yet"
                return {"tables": tables, "summary": text}
            with _opened(cfg) as pipeline:
                result = run_upkeep(pipeline, maintenance_settings(cfg))
            for line in result.asstr().splitlines():
                log.info("%s", line.strip())
            return result.asdict() | {"summary": result.asstr()}  # an XCom: plain JSON, and the run tab's text

        maintain()
    return dag


def build_dags(folder: Path | None = None) -> dict[str, DAG]:
    """The DAGs of every ``*.yaml`` in the pipelines folder (of a pipeline with a table per topic, DAGs that find
    its tables when they run); a broken file is logged, not fatal. An example pipeline (``example: true``) gets
    DAGs only with ``TAILFILL_AIRFLOW_EXAMPLES=1``."""
    dags: dict[str, DAG] = {}
    for path in pipeline_files(folder):
        try:
            cfg = load_pipeline(path)
        except ConfigError as exc:
            log.error("skipping pipeline %s: %s", path, exc)
            continue
        if cfg.example and not settings().airflow_examples:
            log.info("no DAGs for the example pipeline %s (example: true; TAILFILL_AIRFLOW_EXAMPLES=1 makes them)",
                     cfg.name)
            continue
        backfill, incremental = (routed_backfill_dag, routed_incremental_dag) if cfg.target.routed \
            else (backfill_dag, incremental_dag)
        for dag in (backfill(cfg), incremental(cfg), *([maintenance_dag(cfg)] if cfg.maintenance else [])):
            dags[dag.dag_id] = dag
    return dags
