"""``TailfillSubmitOperator``: Tailfill's ingest job as an Airflow task.

Thin on purpose: where the job runs is Tailfill's one runner choice (:mod:`tailfill.run.runners`:
Spark Connect or ``spark-submit``), the Spark settings and code archive come from
:mod:`tailfill.run.runtime`, the arguments from :class:`tailfill.run.contract.JobSpec`, and the
master (the ``spark_default`` connection) and the environment (with the Kafka login of the
pipeline's Airflow connection) from :class:`~tailfill_airflow.hooks.TailfillHook` when the task
runs. The job's lines reach the operator through the runner's public callback (:meth:`observe_line`).

What it adds for the person watching the run:

- **progress** while the job runs: a ``progress`` XCom and a task-log line per committed batch
  (offsets done/planned, rows/s, ETA, freshness; ``stalled: <cause>`` instead after the job restarted a query,
  until a batch commits), and the lane's label in the grid extended with it;
- **causes first**: the job's full output goes to ``spark-submit-try<N>.log`` beside the run's batch
  reports; the task log keeps the job's own lines; a failure raises one headline (what failed,
  the cause, the fix), then what the run committed before it, then where the full output is;
- **extra links** to the run's completeness report, Data Docs, batch reports and job output,
  served by the Tailfill plugin (:mod:`tailfill_airflow.views`).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, NoReturn

from airflow.sdk import BaseOperator, BaseOperatorLink
from airflow.sdk.exceptions import AirflowException

from tailfill.config import PipelineConfig
from tailfill.errors import SparkServerError, TailfillError
from tailfill.offsets import total
from tailfill.pipeline.load import env_names, load_pipeline, resolve_pipeline
from tailfill.plumbing.detached import die_with_parent
from tailfill.redact import redact_text
from tailfill.run import runtime
from tailfill.settings import settings
from tailfill.state.store import StateStore, read_lane, run_reports, write_lane
from tailfill_airflow.causes import JobOutput, committed_summary, fix_for, headline, push_failure, restart_record
from tailfill_airflow.hooks import TailfillHook
from tailfill_airflow.lineage import emit_lineage
from tailfill_airflow.naming import REPLAY_LANE, label_of_args, table_of_job
from tailfill_airflow.progress import Progress, ProgressWatcher

log = logging.getLogger(__name__)
PROGRESS_KEY, RESULT_KEY = "progress", "result"
STOPPED_EXIT = 128 + signal.SIGTERM  # a try stopped by Airflow's SIGTERM: the supervisor keeps the state it set

__all__ = ["JobFailed", "TailfillSubmitOperator"]


class JobFailed(TailfillError):
    """A run of the ingest job failed; the message starts with the cause and the fix."""


# --- extra links ----------------------------------------------------------------------------------


def plugin_url(path: str) -> str:
    """An absolute URL of the Tailfill plugin app (``/tailfill``) under Airflow's ``[api] base_url``."""
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback="").rstrip("/") + "/tailfill/" + path.lstrip("/")


def run_page_url(page: str, dag_id: str, run_id: str, map_index: int | str) -> str:
    """The absolute URL of one of the plugin's pages of a task's run (``<page>/<dag>/<run>/<map index>``)."""
    from urllib.parse import quote

    return plugin_url(f"{page}/{quote(dag_id)}/{quote(run_id, safe='')}/{map_index}")


def replay_report_url(dag_id: str, run_id: str, table: str | None = None) -> str:
    """The absolute URL of the completeness report of a backfill's replay of committed offsets (``table``: of a table
    of a pipeline with a table per topic)."""
    from urllib.parse import quote

    return run_page_url("report", dag_id, run_id, REPLAY_LANE) + (f"?table={quote(table)}" if table else "")


def docs_url(dag_id: str, table: str | None = None) -> str:
    """The absolute URL of a pipeline's Great Expectations Data Docs, served by the plugin (``table``: of a table
    of a pipeline with a table per topic)."""
    from urllib.parse import quote

    return plugin_url(f"docs/{quote(dag_id)}/" + (f"{quote(table)}/" if table else "") + "index.html")


class _RunLink(BaseOperatorLink):
    """A link to one of the plugin's pages of this task's run (``<page>/<dag>/<run>/<map index>``)."""

    page = ""

    def get_link(self, operator, *, ti_key) -> str:
        return run_page_url(self.page, ti_key.dag_id, ti_key.run_id, ti_key.map_index)


class CompletenessReportLink(_RunLink):
    name = "Completeness report"
    page = "report"


class BatchReportsLink(_RunLink):
    name = "Progress and batch reports"
    page = "batches"


class JobOutputLink(_RunLink):
    name = "Spark job output"
    page = "output"


class DataDocsLink(BaseOperatorLink):
    name = "Data Docs"

    def get_link(self, operator, *, ti_key) -> str:
        return docs_url(ti_key.dag_id)


class QuarantineLink(BaseOperatorLink):
    name = "Quarantine and counts"

    def get_link(self, operator, *, ti_key) -> str:
        from urllib.parse import quote

        return plugin_url(f"quarantine/{quote(ti_key.dag_id)}")


# --- the operator -----------------------------------------------------------------------------------


class TailfillSubmitOperator(BaseOperator):
    """The ingest job of one pipeline (``pipeline``: the path of its YAML), run where Tailfill's one runner
    choice puts it (:func:`tailfill.run.runners.choose_runner`, as ``tailfill backfill|tail`` does): by default
    (``auto``) on the Spark Connect server of the ``spark_connect`` connection ``connect_conn_id`` (the Spark
    provider's ``SparkConnectHook`` reads it) when it is defined, else on this home's local Connect server when
    it runs, else through ``spark-submit``; the task log says which and why.

    The master is the ``spark_default`` connection's (``conn_id``, read by :class:`TailfillHook`);
    ``conf`` (optional) is laid over Tailfill's Spark settings, as ``tailfill backfill --conf`` does;
    ``name``: the Spark application's. The tailfill code always goes to the executors with
    ``--py-files``, built by :func:`tailfill.run.runtime.code_archive` when the task runs.
    ``application_args``: the job's :class:`~tailfill.run.contract.JobSpec` as the planner wrote it;
    ``planned_offsets``: what the run will cover when the arguments do not say (the tail's pending
    offsets at planning time); a backfill lane's is the size of its slices.
    """

    template_fields = ("application_args", "planned_offsets", "conf", "name")
    operator_extra_links = (CompletenessReportLink(), BatchReportsLink(), DataDocsLink(), JobOutputLink(),
                            QuarantineLink())

    def __init__(self, *, pipeline: str, application_args: Any = None, conf: dict[str, Any] | None = None,
                 planned_offsets: Any = None, name: str | None = None, conn_id: str = "spark_default",
                 connect_conn_id: str = "spark_connect_default", **kwargs: Any):
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.application_args = application_args if application_args is not None else []
        self.conf = dict(conf or {})  # beyond Tailfill's own Spark settings: only a new application takes them
        self.planned_offsets = planned_offsets
        self.name = name
        self.conn_id = conn_id
        self.connect_conn_id = connect_conn_id
        self._run: Any = None  # the job while it runs (tailfill.run.runners.JobRun)
        self._output: JobOutput | None = None
        self._output_file: Path | None = None
        self._out: Any = None  # the open output file
        self._state: StateStore | None = None  # the pipeline's shared run state, while the task runs
        self._stopped = False  # Airflow sent SIGTERM: the task's state was changed from outside
        self._restarts: list[dict] = []  # this try's restarts of the job's queries (lane record format)
        self._try_number = 0
        self._watcher: ProgressWatcher | None = None

    # --- what the job prints --------------------------------------------------------------------

    def observe_line(self, line: str) -> bool:
        """One line the job printed (the runner's callback): to the output file, secrets redacted; the job's
        own lines (its progress, its events, its error) on to the task log. True for those."""
        assert self._output is not None and self._out is not None
        line = redact_text(line.rstrip("\n"))
        self._out.write(line + "\n")
        self._out.flush()
        own = self._output.observe(line)
        if own:
            log.info("%s", line)
        if len(self._output.restarts) > len(self._restarts):  # the job restarted a query: on the lane's page now
            self._restarts.append(restart_record(self._output.restarts[-1], self._try_number, time.time()))
            if self._watcher is not None:
                self._watcher.poll(force=True)
        return own

    # --- execute ----------------------------------------------------------------------------------

    def execute(self, context: Any) -> None:
        from tailfill.run.contract import JobSpec  # not at parse time
        from tailfill.run.runners import choose_runner

        spec = JobSpec.parse(list(self.application_args))
        cfg = resolve_pipeline(spec.pipeline) if table_of_job(spec.pipeline) else load_pipeline(self.pipeline)
        store = self._state = StateStore.of(cfg)
        planned = (sum(total(s.ranges) for s in spec.slices) if spec.slices
                   else int(self.planned_offsets) if self.planned_offsets is not None else None)
        label = label_of_args(spec.argv())
        ti = context["ti"]
        self._output = JobOutput()
        self._output_file = runtime.log_dir(cfg.name, spec.run_id) / f"spark-submit-try{ti.try_number}.log"
        hook = TailfillHook(cfg)
        env = {**os.environ, **runtime.shipped_code_env(), **hook.job_env()}
        runner = choose_runner(settings().spark_mode, hook.spark_master(self.conn_id), self.conf, env=env,
                               secrets=env_names(cfg), submit_env_=env, name=self.name,
                               remote=hook.connect_url(self.connect_conn_id), say=lambda line: log.info("%s", line))
        log.info("%s: run %s, %s; full job output in %s", cfg.name, spec.run_id,
                 f"{planned:,} offsets planned" if planned is not None else "open-ended", self._output_file)

        earlier = read_lane(store, spec.run_id)  # a retry: the batches and restarts of the tries before stay theirs
        before = [r for r in (earlier.restarts if earlier else []) if r.get("try") != ti.try_number]
        self._try_number = ti.try_number

        def publish(p: Progress) -> None:
            if self._stopped:  # Airflow no longer takes this try's XComs or label
                p = replace(p, state="stopped")
            log.info("progress %s: %s", label, p.asstr())
            ended = None if p.state == "running" else p.updated_at
            write_lane(store, spec.run_id, state=p.state, ended_at=ended, restarts=before + self._restarts)
            if not self._stopped:
                ti.xcom_push(key=PROGRESS_KEY, value=p.asdict())
                _show_in_grid(ti, f"{label} · {p.asstr()}")

        watcher = self._watcher = ProgressWatcher(store, spec.run_id, planned, publish, tail=spec.mode == "tail",
                                                  restarts=lambda: before + self._restarts)
        tries = {**(earlier.tries if earlier else {}), str(ti.try_number): watcher.started_at}
        write_lane(store, spec.run_id, label=label, planned=planned, started_at=watcher.started_at,
                   try_number=ti.try_number, tries=tries, cause=None, state="running", ended_at=None,
                   restarts=before)
        self._note_sigterm()
        die_with_parent()  # a worker killed outright takes this task, and the job it runs, with it
        self._output_file.parent.mkdir(parents=True, exist_ok=True)
        failure: JobFailed | None = None
        with self._output_file.open("w") as self._out:
            try:
                with watcher, hook.credentials_exported():  # a Connect job's client side runs in this process
                    self._run = runner.submit(spec, self.observe_line)
                    outcome = self._run.wait()
                    if outcome.code != 0:
                        raise AirflowException(f"the job failed (exit {outcome.code})")
            except (AirflowException, SparkServerError) as exc:
                if self._stopped:
                    self._exit_stopped(cfg, spec, label)
                failure = self._failure(cfg, spec, label, outcome.code if self._run is not None else exc)
        if failure is not None:
            first = str(failure).splitlines()[0]
            write_lane(store, spec.run_id, cause=first)
            error = self._output.error
            push_failure(ti, f"ingest of {cfg.name} ({label})", error.error_class if error else type(failure).__name__,
                         first, fix_for(error) or None, error.retryable if error else True)
            raise failure from None
        if self._stopped:  # the job ended well, but Airflow changed the task's state meanwhile: report nothing
            self._exit_stopped(cfg, spec, label)
        result = self._output.result
        if result is not None:
            ti.xcom_push(key=RESULT_KEY, value=[asdict(r) for r in result.results])
            emit_lineage(cfg, sum(r.rows for r in result.results), sum(r.quarantined for r in result.results), self)

    # --- stopped from outside -------------------------------------------------------------------

    def _note_sigterm(self) -> None:
        """Note Airflow's SIGTERM (the run marked failed, the task cleared or marked while it ran), then
        let the task runner's own handler call :meth:`on_kill`."""
        previous = signal.getsignal(signal.SIGTERM)

        def stopped(signum: int, frame: Any) -> None:
            self._stopped = True
            if callable(previous):
                previous(signum, frame)

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, stopped)

    def on_kill(self) -> None:
        """Stop the job (kill its ``spark-submit``, or stop its query on the Spark Connect server); what it
        committed stays committed."""
        if self._run is None:
            return
        log.warning("Airflow stopped this task: %s", self._run.stopping)
        self._run.kill()

    def _exit_stopped(self, cfg: PipelineConfig, spec: Any, label: str) -> NoReturn:
        """One line for a try stopped from outside, then leave without reporting a state: Airflow set it
        already, and refuses (``invalid_state``) any the task would report."""
        reports = run_reports(self._state, spec.run_id)
        committed = committed_summary(reports).replace("before the failure", "before the stop")
        line = (f"ingest of {cfg.name} ({label}, run {spec.run_id}) stopped: its task's state was changed in "
                f"Airflow while it ran (run or task marked, or cleared); {committed}; clearing the task resumes")
        write_lane(self._state, spec.run_id, state="stopped", cause=line)
        log.warning(line)
        logging.shutdown()  # flush the task log before leaving
        os._exit(STOPPED_EXIT)

    def _failure(self, cfg: PipelineConfig, spec: Any, label: str, ended: int | Exception) -> JobFailed:
        """The task's error: what failed and why, with the fix (``ended``: the job's exit code, or why it never
        started), then what the run committed, then where the full output is."""
        assert self._output is not None
        what = f"ingest of {cfg.name} ({spec.mode}, {label}, run {spec.run_id})"
        first = headline(what, self._output, ended if isinstance(ended, int) else "-")
        if isinstance(ended, Exception):  # the job never started
            first += f" — it did not start: {redact_text(str(ended).splitlines()[0])[:300]}"
        committed = committed_summary(run_reports(self._state, spec.run_id))
        log.error(first)
        log.error(committed)
        return JobFailed(f"{first}\n{committed}\nfull job output ({self._output.lines} lines): {self._output_file}")


def _show_in_grid(ti: Any, text: str) -> None:
    """Put ``text`` in a mapped lane's label (grid, Gantt, task list) while it runs.

    Uses the task runner's own message for the rendered map index, which the runner sends again
    with the final label after ``execute``; outside a task runner (tests) this does nothing.
    """
    if getattr(ti, "map_index", -1) in (-1, None):
        return
    try:
        from airflow.sdk.execution_time.comms import SetRenderedMapIndex
        from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS
    except ImportError:
        return
    SUPERVISOR_COMMS.send(msg=SetRenderedMapIndex(rendered_map_index=text[:250]))

