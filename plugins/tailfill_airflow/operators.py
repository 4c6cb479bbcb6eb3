"""``TailfillSubmitOperator``: the apache-spark provider's ``SparkSubmitOperator`` for Tailfill's job.

Thin on purpose: the application, Spark settings and code archive come from
:mod:`tailfill.run.runtime`, the arguments from :class:`tailfill.run.submit.JobSpec`, and the
environment (with the Kafka login of the pipeline's Airflow connection) from
:class:`~tailfill_airflow.hooks.TailfillHook` when the task runs.

What it adds for the person watching the run:

- **progress** while the job runs: a ``progress`` XCom and a task-log line per committed batch
  (offsets done/planned, rows/s, ETA, freshness), and the lane's label in the grid extended with it;
- **causes first**: the job's full output goes to ``spark-submit-try<N>.log`` beside the run's batch
  reports; the task log keeps the job's own lines; a failure raises one headline (what failed,
  the cause, the fix), then what the run committed before it, then where the full output is;
- **extra links** to the run's completeness report, Data Docs, batch reports and job output,
  served by the Tailfill plugin (:mod:`tailfill_airflow.views`).
"""

from __future__ import annotations

import logging
import os
import queue
import re
import signal
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperatorLink
from airflow.sdk.exceptions import AirflowException

from tailfill.config import PipelineConfig
from tailfill.errors import TailfillError
from tailfill.offsets import total
from tailfill.pipeline.load import env_names, load_pipeline
from tailfill.redact import redact_text
from tailfill.run import runtime
from tailfill.run.runtime import code_archive_path
from tailfill.state.store import StateStore, read_lane, run_reports, write_lane
from tailfill_airflow.causes import JobOutput, committed_summary, headline
from tailfill_airflow.hooks import TailfillHook
from tailfill_airflow.naming import lane_label
from tailfill_airflow.progress import Progress, ProgressWatcher

log = logging.getLogger(__name__)
PROGRESS_KEY, RESULT_KEY = "progress", "result"
STOPPED_EXIT = 128 + signal.SIGTERM  # a try stopped by Airflow's SIGTERM: the supervisor keeps the state it set
# Lines of the provider's own interest (driver / application ids of cluster modes) still reach it.
_PROVIDER_LINES = re.compile(r"driver-[0-9-]+|application[0-9_]+|pod name:|spark-app-selector|[eE]xit code:")

__all__ = ["JobFailed", "TailfillSubmitOperator"]


class JobFailed(TailfillError):
    """A ``spark-submit`` of the ingest job failed; the message starts with the cause and the fix."""


# --- extra links ----------------------------------------------------------------------------------


def plugin_url(path: str) -> str:
    """An absolute URL of the Tailfill plugin app (``/tailfill``) under Airflow's ``[api] base_url``."""
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback="").rstrip("/") + "/tailfill/" + path.lstrip("/")


def run_page_url(page: str, dag_id: str, run_id: str, map_index: int) -> str:
    """The absolute URL of one of the plugin's pages of a task's run (``<page>/<dag>/<run>/<map index>``)."""
    from urllib.parse import quote

    return plugin_url(f"{page}/{quote(dag_id)}/{quote(run_id, safe='')}/{map_index}")


def docs_url(dag_id: str) -> str:
    """The absolute URL of a pipeline's Great Expectations Data Docs, served by the plugin."""
    from urllib.parse import quote

    return plugin_url(f"docs/{quote(dag_id)}/index.html")


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


class TailfillSubmitOperator(SparkSubmitOperator):
    """``spark-submit`` of the ingest job of one pipeline (``pipeline``: the path of its YAML).

    The master is the ``spark_default`` connection's; ``conf`` (optional) is laid over Tailfill's
    Spark settings, as ``tailfill backfill --conf`` does. The tailfill code always goes to the
    executors with ``--py-files``, built by :func:`tailfill.run.runtime.code_archive` when the task runs.
    ``planned_offsets``: what the run will cover when the arguments do not say (the tail's pending
    offsets at planning time); a backfill lane's is the size of its slices.
    """

    template_fields = (*SparkSubmitOperator.template_fields, "planned_offsets")
    operator_extra_links = (CompletenessReportLink(), BatchReportsLink(), DataDocsLink(), JobOutputLink(),
                            QuarantineLink())

    def __init__(self, *, pipeline: str, conf: dict[str, Any] | None = None, planned_offsets: Any = None,
                 **kwargs: Any):
        kwargs.setdefault("conn_id", "spark_default")
        super().__init__(application=str(runtime.job_file()), conf=runtime.spark_conf() | (conf or {}),
                         py_files=str(code_archive_path()), **kwargs)
        self.pipeline = pipeline
        self.planned_offsets = planned_offsets
        self._extra_conf = dict(conf or {})  # beyond Tailfill's own: only a new application takes them
        self._warm_run_id: str | None = None  # the run on the warm Spark server, while there
        self._warm_code: int | None = None
        self._output: JobOutput | None = None
        self._output_file: Path | None = None
        self._state: StateStore | None = None  # the pipeline's shared run state, while the task runs
        self._stopped = False  # Airflow sent SIGTERM: the task's state was changed from outside

    # --- what the job prints --------------------------------------------------------------------

    def _get_hook(self):
        hook = super()._get_hook()
        original = hook._process_spark_submit_log
        hook._process_spark_submit_log = lambda itr: original(self._divert(itr))
        return hook

    def _divert(self, lines: Iterator[str]) -> Iterator[str]:
        """Every line, secrets redacted, to the output file; the job's own (and the provider's) on to the task log."""
        assert self._output is not None and self._output_file is not None
        self._output_file.parent.mkdir(parents=True, exist_ok=True)
        with self._output_file.open("w") as out:
            for line in map(redact_text, lines):
                out.write(line if line.endswith("\n") else line + "\n")
                out.flush()
                if self._output.observe(line) or _PROVIDER_LINES.search(line):
                    yield line

    # --- warm Spark --------------------------------------------------------------------------------

    def _why_cold(self) -> str | None:
        """Why this job cannot run on the warm Spark server (None: it can), as ``TAILFILL_SPARK`` asks."""
        from tailfill.run import warm_spark  # not at parse time: it imports the planner (broker, catalog)

        if warm_spark.default_mode() != "warm":
            return f"{warm_spark.MODE_ENV} is not warm"
        if self._hook is None:
            self._hook = self._get_hook()
        master = self._hook._connection["master"]
        return warm_spark.why_cold(master, self._extra_conf)

    def _run_warm(self, cfg: PipelineConfig, spec: Any) -> int | None:
        """Run the job on the warm Spark server, its lines handled as a ``spark-submit``'s; its exit code,
        or None when the server would not take it (then it runs through ``spark-submit``)."""
        from tailfill.run import warm_spark

        lines: queue.Queue[str | None] = queue.Queue()
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["code"], _ = warm_spark.run_warm(spec, {**os.environ, **(self.env_vars or {})}, lines.put,
                                                         env_names(cfg))
            except warm_spark.SparkServerError as exc:
                outcome["refused"] = str(exc)
            finally:
                lines.put(None)

        self._warm_run_id = spec.run_id
        threading.Thread(target=run, name="warm-spark-job", daemon=True).start()
        for line in self._divert(iter(lines.get, None)):
            log.info("%s", line.rstrip())
        if "refused" in outcome:
            log.warning("not on the warm Spark server (%s): running spark-submit", outcome["refused"])
            self._warm_run_id = None
            return None
        self._warm_code = outcome["code"]
        return self._warm_code

    # --- execute ----------------------------------------------------------------------------------

    def execute(self, context: Any) -> None:
        from tailfill.run.contract import JobSpec  # not at parse time: it imports the planner (broker, catalog

        cfg = load_pipeline(self.pipeline)
        store = self._state = StateStore.of(cfg)
        spec = JobSpec.parse(list(self.application_args))
        planned = (sum(total(s.ranges) for s in spec.slices) if spec.slices
                   else int(self.planned_offsets) if self.planned_offsets is not None else None)
        label = lane_label([s.to_dict() for s in spec.slices]) if spec.slices else "tail"
        ti = context["ti"]
        folder = runtime.log_dir(cfg.name, spec.run_id)
        self._output = JobOutput()
        self._output_file = folder / f"spark-submit-try{ti.try_number}.log"
        self.py_files = str(runtime.code_archive())  # this worker's code, fresh (the path is the same)
        self.env_vars = {**(self.env_vars or {}), **runtime.shipped_code_env(), **TailfillHook(cfg).job_env()}
        log.info("%s: run %s, %s; full job output in %s", cfg.name, spec.run_id,
                 f"{planned:,} offsets planned" if planned is not None else "open-ended", self._output_file)

        def publish(p: Progress) -> None:
            if self._stopped:  # Airflow no longer takes this try's XComs or label
                p = replace(p, state="stopped")
            log.info("progress %s: %s", label, p.asstr())
            ended = None if p.state == "running" else p.updated_at
            write_lane(store, spec.run_id, state=p.state, ended_at=ended)
            if not self._stopped:
                ti.xcom_push(key=PROGRESS_KEY, value=p.asdict())
                _show_in_grid(ti, f"{label} · {p.asstr()}")

        watcher = ProgressWatcher(store, spec.run_id, planned, publish)
        earlier = read_lane(store, spec.run_id)  # a retry: the batches of the tries before stay theirs
        tries = {**(earlier.tries if earlier else {}), str(ti.try_number): watcher.started_at}
        write_lane(store, spec.run_id, label=label, planned=planned, started_at=watcher.started_at,
                   try_number=ti.try_number, tries=tries, cause=None, state="running", ended_at=None)
        self._note_sigterm()
        why_cold = self._why_cold()
        if why_cold is None:
            log.info("on the warm Spark server (TAILFILL_SPARK=warm)")
        try:
            with watcher:
                code = self._run_warm(cfg, spec) if why_cold is None else None
                if code is None and self._stopped:  # never fall back to spark-submit once Airflow stopped us
                    raise AirflowException("stopped before its job could start")
                if code is None:
                    super().execute(context)
                elif code != 0:
                    raise AirflowException(f"the job on the warm Spark server failed (exit {code})")
        except AirflowException as exc:
            if self._stopped:
                self._exit_stopped(cfg, spec, label)
            failure = self._failure(cfg, spec, label, exc)
            write_lane(store, spec.run_id, cause=str(failure).splitlines()[0])
            raise failure from None
        if self._stopped:  # the job ended well, but Airflow changed the task's state meanwhile: report nothing
            self._exit_stopped(cfg, spec, label)
        result = self._result()
        if result is not None:
            ti.xcom_push(key=RESULT_KEY, value=result)

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
        """Stop the job (the provider's kill of ``spark-submit``, or a cancel on the warm Spark server);
        what it committed stays committed."""
        if self._warm_run_id is not None:
            from tailfill.run import warm_spark

            log.warning("Airflow stopped this task: cancelling its job on the warm Spark server")
            warm_spark.cancel_warm(self._warm_run_id)
            return
        log.warning("Airflow stopped this task: killing its spark-submit")
        super().on_kill()

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

    def _result(self) -> list[dict] | None:
        """The job's result (:class:`tailfill.run.contract.JobResult`): one IngestResult per query."""
        from dataclasses import asdict

        assert self._output is not None
        document = self._output.result
        return [asdict(r) for r in document.results] if document is not None else None

    def _failure(self, cfg: PipelineConfig, spec: Any, label: str, exc: AirflowException) -> JobFailed:
        assert self._output is not None
        submitted = getattr(self._hook, "_submit_sp", None)
        returncode = (self._warm_code if self._warm_code is not None
                      else submitted.returncode if submitted is not None else "?")
        what = f"ingest of {cfg.name} ({spec.mode}, {label}, run {spec.run_id})"
        first = headline(what, self._output, returncode)
        committed = committed_summary(run_reports(self._state, spec.run_id))
        if self._output.cause == "no cause printed":  # not the job's failure: spark-submit's own
            first += f" — spark-submit said: {redact_text(str(exc).splitlines()[0])[:300]}"
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

