"""Warm Spark: start, supervise and talk to the long-lived Spark server (:mod:`tailfill.run.spark_server`).

A job asked to run warm (``tailfill backfill|tail --spark warm``, or ``TAILFILL_SPARK=warm``, which
the local Airflow sets) goes to the server recorded in ``$TAILFILL_HOME/spark-server.json``
(:class:`~tailfill.run.runners.WarmServerRunner`). It is started when none runs, and replaced when the
one running has other code and is idle. The server refuses a job (:class:`Refused`; the job then runs
cold, through ``spark-submit``, saying why) when settings that reach the job (``TAILFILL_*``,
``AWS_*``, Spark's, the pipeline's secrets) differ from the server's (compared as digests, never sent
or printed); other Spark settings or master
(:func:`~tailfill.run.runners.why_submit`) need a new application anyway. No
pyspark here.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from tailfill.errors import SparkServerError
from tailfill.plumbing.detached import running, stop_detached
from tailfill.plumbing.durable import locked
from tailfill.run import runtime
from tailfill.run.contract import JobSpec
from tailfill.run.server_settings import differing_settings, digest, job_env_digests, server_env  # noqa: F401
from tailfill.settings import settings

SERVED_BY = "warm Spark server:"  # the first line of a job the server runs
START_TIMEOUT_S = 180.0  # a JVM and a session on a busy 2-core machine


def state_file(home: Path | None = None) -> Path:
    """The warm Spark server's address file: ``$TAILFILL_HOME/spark-server.json``."""
    return (home or settings().home) / "spark-server.json"


def server_state(home: Path | None = None) -> dict | None:
    """The running server's ``{pid, url, code, master, …}``, or None."""
    return running(state_file(home))


def _request(url: str, method: str, path: str, body: dict | None = None,
             timeout: float | None = 10.0) -> http.client.HTTPResponse:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
    return conn.getresponse()


def server_status(state: dict) -> dict | None:
    """What the server at ``state['url']`` says of itself, or None if it does not answer."""
    try:
        resp = _request(state["url"], "GET", "/status", timeout=5.0)
        return json.loads(resp.read()) if resp.status == 200 else None
    except OSError:
        return None


def spark_server_up(home: Path | None = None, env: Mapping[str, str] | None = None) -> dict:
    """The running server (started if none runs, or replaced if it runs other code and is idle)."""
    home = home or settings().home
    with locked(home / "spark-server.lock"):
        state = server_state(home)
        if state is not None:
            status = server_status(state)
            if status is not None and (status["code"] == runtime.code_fingerprint() or status["running"]):
                return status
            stop_detached(state, state_file(home), grace_s=30.0)  # dead inside, or idle on old code
        return _start(home, env)


def _start(home: Path, env: Mapping[str, str] | None) -> dict:
    log_path = home / "logs" / "spark-server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    child_env = server_env(env, home)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tailfill.run.spark_server"], env=child_env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SparkServerError(f"the warm Spark server exited with code {proc.returncode} before serving "
                                   f"(see {log_path})")
        state = server_state(home)
        if state is not None and state["pid"] == proc.pid:
            status = server_status(state)
            if status is not None:
                return status
        time.sleep(0.2)
    proc.kill()
    raise SparkServerError(f"the warm Spark server did not serve within {START_TIMEOUT_S:.0f}s (see {log_path})")


def spark_server_down(home: Path | None = None) -> bool:
    """Stop the server (its running jobs are cancelled: what they committed stays); True if one ran."""
    home = home or settings().home
    with locked(home / "spark-server.lock"):
        return stop_detached(server_state(home), state_file(home), grace_s=30.0)


class Refused(SparkServerError):
    """The server would not take this job (its settings differ); the job can still run cold."""


def job_request(status: dict, spec: JobSpec, digests: dict[str, str | None]) -> http.client.HTTPResponse:
    """``spec`` handed to the server of ``status`` (``digests``: of the caller's settings that reach the job):
    the response that streams the job's lines. Raises :class:`Refused` when the server will not take it."""
    try:
        resp = _request(status["url"], "POST", "/jobs", {"argv": spec.argv(), "env": digests}, timeout=None)
    except OSError as exc:
        raise SparkServerError(f"the warm Spark server at {status['url']} did not take the job: {exc}") from None
    if resp.status != 200:
        raise Refused(json.loads(resp.read() or b"{}").get("error", f"HTTP {resp.status}"))
    return resp


def cancel_warm(run_id: str, home: Path | None = None) -> int:
    """Cancel the jobs of ``run_id`` on the running server; how many were cancelled."""
    state = server_state(home)
    if state is None:
        return 0
    try:
        resp = _request(state["url"], "POST", f"/jobs/{run_id}/cancel", {})
        return int(json.loads(resp.read()).get("cancelled", 0))
    except OSError:
        return 0
