"""One runner choice for the ingest job: where a :class:`~tailfill.run.contract.JobSpec` runs, whoever asks.

A :class:`Runner` submits a spec and hands back a :class:`JobRun` to wait for, or to kill; every line
the job prints (its events among them) goes to the caller's ``on_line`` as it comes, secrets redacted.
Backends: :class:`SparkSubmitRunner` (a ``spark-submit`` of its own: a new application),
:class:`ConnectRunner` (a session on a Spark Connect server: a cluster's ``sc://`` endpoint or this
home's local one, :mod:`tailfill.run.connect_server`). :func:`choose_runner` makes the one decision for the
CLI and the Airflow operator alike, and ``auto`` says which it took and why.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_any
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tailfill.errors import ConfigError, ErrorInfo, SparkServerError
from tailfill.plumbing.detached import dies_with_this_process
from tailfill.redact import redact_text
from tailfill.run import class_archive, runtime
from tailfill.run.contract import JobResult, JobSpec, read_event
from tailfill.run.job_stop import STOP_FILE_ENV, StopAsked, ask_by_file
from tailfill.run.submit import spark_submit_command, submit_env
from tailfill.settings import settings, spark_mode_problem

OnLine = Callable[[str], None]
SERVED_BY = "Spark Connect:"  # the first line of a job run over Spark Connect


@dataclass(frozen=True)
class Outcome:
    """How a run ended: its exit code as ``spark-submit`` gives it (0; 2 when the job failed with a cause; any
    other: it ended without saying why) and its result, if it printed one."""

    code: int
    result: JobResult | None


class JobRun(Protocol):
    """A job submitted: wait for its end, stop it between batches, or kill it."""

    stopping: str  # what the caller says when it kills the run ("killing its spark-submit")

    def wait(self) -> Outcome: ...

    def stop(self, why: str) -> None:
        """Ask the job to stop after its batch in flight (``why``: a short phrase its log line gives)."""
        ...

    def kill(self) -> None: ...


class Runner(Protocol):
    """Where jobs run."""

    def submit(self, spec: JobSpec, on_line: OnLine) -> JobRun:
        """Start ``spec``; its lines go to ``on_line``. Raises :class:`SparkServerError` when it cannot start."""
        ...


def why_submit(master: str | None, conf: Mapping[str, str] | None) -> str | None:
    """Why a job with this master and these extra Spark settings needs an application of its own
    (``spark-submit``), or None: the application of this home's Spark Connect server already runs, with its own
    settings, on :func:`~tailfill.run.runtime.master`."""
    if conf:
        return f"extra Spark settings asked for ({', '.join(sorted(conf))}) apply only to a new application"
    if master and master != runtime.master():
        return f"master {master} asked for; this home's Spark Connect server runs on {runtime.master()}"
    return None


class _Lines:
    """A job's output lines, handed on (redacted) and read for its result."""

    def __init__(self, on_line: OnLine):
        self.on_line, self.result = on_line, None
        self.results: dict[str, JobResult] = {}  # of jobs run together, by run id

    def __call__(self, line: str) -> None:
        line = redact_text(line.rstrip("\n"))
        event = read_event(line)
        if isinstance(event, JobResult):
            self.result = event
            if event.run_id is not None:
                self.results[event.run_id] = event
        self.on_line(line)


class SparkSubmitRunner:
    """``spark-submit`` of the job (:func:`~tailfill.run.submit.spark_submit_command`): a new application on
    ``master`` with ``conf`` over Tailfill's Spark settings, in ``env`` (default: this process's, with
    Tailfill's Spark environment and shipped code); ``name``: the application's."""

    def __init__(self, master: str | None = None, conf: Mapping[str, str] | None = None,
                 env: Mapping[str, str] | None = None, name: str | None = None):
        self.master, self.conf, self.env, self.name = master, dict(conf or {}), env, name

    def submit(self, spec: JobSpec, on_line: OnLine) -> SparkSubmitRun:
        return self._start(spec, on_line)


    def submit_together(self, specs: Sequence[JobSpec], on_line: OnLine) -> list[JobRun]:
        """Start every spec's job in one ``spark-submit`` (one JVM, one session, the jobs at once); a run each."""
        run = self._start(specs, on_line)
        return [TogetherRun(run, spec.run_id) for spec in specs]

    def _start(self, spec: JobSpec | Sequence[JobSpec], on_line: OnLine) -> SparkSubmitRun:
        dump = class_archive.dump_for(runtime.JVM_OPTIONS)  # the first run without a class archive writes it
        cmd = spark_submit_command(spec, self.master, self.conf, dump)
        if self.name:
            cmd[1:1] = ["--name", self.name]
        return SparkSubmitRun(cmd, dict(self.env) if self.env is not None else submit_env(), on_line, dump)


class SparkSubmitRun:
    """A running ``spark-submit``: both of its streams, line by line, to ``on_line``.

    The job is this process's: a process group of its own (a terminal's Ctrl-C reaches the caller, which decides),
    its JVM SIGKILLed by the kernel when this process dies however it dies, and the job's Python driver when its JVM
    does (``spark_jobs/ingest.py``). Start it from a thread that outlives it (see
    :func:`~tailfill.plumbing.detached.dies_with_this_process`). :meth:`stop` writes the file the job watches
    (``TAILFILL_STOP_FILE``); :meth:`kill` and the job's end take its whole process group.
    """

    stopping = "killing its spark-submit"

    def __init__(self, cmd: list[str], env: dict[str, str], on_line: OnLine, dump: class_archive.Dump | None = None):
        self.lines, self.dump = _Lines(on_line), dump
        self.stop_file = Path(tempfile.gettempdir()) / f"tailfill-stop-{uuid.uuid4().hex}"
        self.proc = subprocess.Popen(cmd, env={**env, STOP_FILE_ENV: str(self.stop_file)}, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1,
                                     start_new_session=True, preexec_fn=dies_with_this_process())
        self.reader = threading.Thread(target=self._read, name="spark-submit-output", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines(line)

    def wait(self) -> Outcome:
        with contextlib.suppress(ChildProcessError):  # ended, not yet collected: its group id is still its own
            os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)
        self._kill_group()  # a process the job left behind goes with it
        code = self.proc.wait()
        self.stop_file.unlink(missing_ok=True)
        self.reader.join(timeout=30)  # a worker outside the group may hold the pipe; never wait on it for ever
        if self.dump is not None:
            self.dump.settle(code)
        return Outcome(code, self.lines.result)

    def stop(self, why: str) -> None:
        if self.proc.poll() is None:
            ask_by_file(self.stop_file, why)

    def kill(self) -> None:
        self._kill_group()

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)


class TogetherRun:
    """One of the jobs a ``spark-submit`` runs together: the application's end, with this job's own result."""

    stopping = "killing its spark-submit, which runs other jobs too"

    def __init__(self, run: SparkSubmitRun, run_id: str):
        self.run, self.run_id = run, run_id

    def wait(self) -> Outcome:
        code = self.run.wait().code
        result = self.run.lines.results.get(self.run_id)
        if result is None:
            return Outcome(code or 1, None)
        return Outcome(2 if result.error else 0, result)

    def stop(self, why: str) -> None:
        self.run.stop(why)

    def kill(self) -> None:
        self.run.kill()


class ConnectRunner:
    """Spark Connect: the server at ``remote`` (``sc://…``), else this home's local server (started if none runs,
    :mod:`tailfill.run.connect_server`). The job's client side (planning reads, the poll and restart loops) runs
    in this process; its batches run on the server, Tailfill's code shipped to it with the session."""

    def __init__(self, remote: str | None = None, env: Mapping[str, str] | None = None, secrets: tuple[str, ...] = (),
                 home: Path | None = None):
        self.remote, self.env, self.secrets = remote, env, secrets
        self.home = home or settings().home

    def submit(self, spec: JobSpec, on_line: OnLine) -> ConnectRun:
        from tailfill.run.connect_server import connect_server_up, job_file, serves, shared_session

        if self.remote and not serves(self.remote, self.home):
            return ConnectRun(spec, self.remote, on_line, None)
        job = job_file(self.home, spec.run_id)  # the server is busy with this job from now on
        try:
            state = connect_server_up(self.home, self.env, self.secrets, job)
        except BaseException:
            job.unlink(missing_ok=True)
            raise
        fingerprint = runtime.code_fingerprint()
        return ConnectRun(spec, state["url"], on_line, job,
                          lambda closed: shared_session(self.home, state, fingerprint, closed))


class ConnectRun:
    """A job whose client runs in a thread of this process, on a Spark Connect session: its own, or (``shared``)
    the one the jobs of this home share on its local server."""

    stopping = "stopping its query on the Spark Connect server"

    def __init__(self, spec: JobSpec, url: str, on_line: OnLine, job: Path | None,
                 shared: Callable[[str | None], str] | None = None):
        self.spec, self.url, self.job = spec, url, job  # job: the local server's note that it runs this job
        self.shared = shared
        self.lines = _Lines(on_line)
        self.cancel = threading.Event()
        self.asked = StopAsked()
        self.thread = threading.Thread(target=self._run, name=f"connect-{spec.run_id}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._session_run()
        finally:
            if self.job is not None:
                self.job.unlink(missing_ok=True)

    def _session_run(self) -> None:
        from tailfill.run.spark_connect import connect_session, redact_url
        from tailfill.run.spark_job import run_to_result

        try:
            spark = connect_session(self.url, self.spec.run_id, self.shared)
        except SparkServerError as exc:
            self.lines(f"error: {exc}")
            self.lines(JobResult(error=ErrorInfo.of(exc)).line())
            return
        self.lines(f"{SERVED_BY} {redact_url(self.url)}, session {spark.session_id}, job {self.spec.run_id}")
        try:
            result = run_to_result(self.spec, spark, self.lines, lambda event: self.lines(event.line()),
                                   self.cancel, stop=self.asked)
            self.lines(result.line())
        finally:
            with contextlib.suppress(Exception):  # a server that went away has no session to release
                spark.stop()

    def wait(self) -> Outcome:
        try:
            while self.thread.is_alive():
                self.thread.join(0.5)
        except KeyboardInterrupt:  # Ctrl-C: stop the query (its batches so far stay), then say so
            self.kill()
            self.thread.join(60)
            raise
        result = self.lines.result
        if result is None:
            self.lines(f"error: the job on the Spark Connect server at {self.url} ended without a result")
            return Outcome(1, None)
        return Outcome(2 if result.error else 0, result)

    def stop(self, why: str) -> None:
        self.asked.ask(why)

    def kill(self) -> None:
        self.cancel.set()


def run_side_by_side(runner: Runner, specs: Sequence[JobSpec], on_line: OnLine, one_application: bool = False,
                     track: Callable[[JobRun], JobRun] = lambda run: run) -> list[Outcome]:
    """Every spec's job at once (a backfill's lanes, as the DAG runs them), waited for together, in ``specs``'
    order. Ctrl-C, or a job that cannot start, kills every job already started (what each committed stays)
    and waits for them to end before it goes on up. ``one_application``: through ``spark-submit``, one
    application runs them all (a routed pipeline's tables); a Spark Connect server is one already. ``track``
    hands each run to its owner as it starts (:class:`~tailfill.run.owner.JobOwner`)."""
    started: list[tuple[JobSpec, JobRun]] = []
    pool = ThreadPoolExecutor(max_workers=max(len(specs), 1), thread_name_prefix="lane")
    try:
        if one_application and isinstance(runner, SparkSubmitRunner) and len(specs) > 1:
            started = [(spec, track(run)) for spec, run in zip(specs, runner.submit_together(specs, on_line),
                                                                strict=True)]
        for spec in specs[len(started):]:
            started.append((spec, track(runner.submit(spec, on_line))))
        waits = [pool.submit(run.wait) for _, run in started]
        while not all(w.done() for w in waits):
            wait_any(waits, timeout=0.5)  # short waits: Ctrl-C reaches this thread between them
        return [w.result() for w in waits]
    except BaseException:
        for spec, run in started:
            on_line(f"[{spec.run_id}] stopped: {run.stopping}")
            with contextlib.suppress(Exception):
                run.kill()
        raise
    finally:
        pool.shutdown(wait=True)


def choose_runner(mode: str | None = None, master: str | None = None, conf: Mapping[str, str] | None = None,
                  env: Mapping[str, str] | None = None, secrets: tuple[str, ...] = (),
                  submit_env_: Mapping[str, str] | None = None, name: str | None = None, remote: str | None = None,
                  say: OnLine | None = None) -> Runner:
    """Where a job runs (``mode``, default ``TAILFILL_SPARK``): ``connect`` (the Spark Connect server at
    ``remote``, default ``TAILFILL_SPARK_REMOTE``, else this home's local one), ``submit``, or ``auto``:
    Connect when a server is configured or this home's local one runs, else ``spark-submit``; ``say`` gets one
    line saying which and why. ``env``: the caller's environment (the settings a long-lived server's job is
    compared by); ``submit_env_``: a ``spark-submit``'s whole environment (default: this process's, with
    Tailfill's)."""
    cold = SparkSubmitRunner(master, conf, submit_env_, name)
    mode = mode or settings().spark_mode
    problem = spark_mode_problem(mode)
    if problem is not None:
        raise ConfigError(f"Spark mode {mode!r}: {problem}")
    remote = remote or settings().spark_remote
    if mode == "connect":
        return ConnectRunner(remote, env, secrets)
    if mode == "submit":
        return cold
    runner, why = _auto(remote, master, conf, env, secrets, cold)
    if say is not None:
        say(f"Spark: {why}")
    return runner


def _auto(remote: str | None, master: str | None, conf: Mapping[str, str] | None, env: Mapping[str, str] | None,
          secrets: tuple[str, ...], cold: SparkSubmitRunner) -> tuple[Runner, str]:
    """The ``auto`` choice and its reason, in words."""
    from tailfill.run.connect_server import server_state
    from tailfill.run.spark_connect import redact_url

    if remote:
        return ConnectRunner(remote, env, secrets), f"Spark Connect at {redact_url(remote)} (configured)"
    why = why_submit(master, conf)
    if why is not None:
        return cold, f"spark-submit: {why}"
    state = server_state()
    if state is not None:
        return ConnectRunner(None, env, secrets), f"Spark Connect, this home's local server at {state['url']} (running)"
    return cold, ("spark-submit: no Spark Connect server configured (TAILFILL_SPARK_REMOTE, an Airflow spark_connect "
                  "connection) or running for this home (`tailfill connect-server up` starts one)")
