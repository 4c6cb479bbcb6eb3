"""Start the local Airflow (``tailfill_airflow.local``) for a test, talk to its REST API, stop all of it.

    with AirflowServer(tmp / "airflow", env={"TAILFILL_HOME": ..., "TAILFILL_PIPELINES": ...}) as af:
        run_id = af.trigger_dag("e2e_backfill", {"slices": 3})
        af.wait_for_run("e2e_backfill", run_id, timeout=600)

The launcher (which starts each Airflow component, and the log servers on loopback) runs in its
own session on a free loopback port with its own ``AIRFLOW_HOME``; at exit it is terminated (it
stops the components), then its group killed, and any process left whose environment holds that
``AIRFLOW_HOME`` (a spark-submit JVM, a task runner that left its group) is killed too. Only the
standard library is used for HTTP. :func:`local_airflow` is the tests' usual setup: metadata on the
session's Postgres, the pipelines of one folder, the DAGs parsed and unpaused.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from processes import kill_marked, listening, processes_with

from tailfill.dev.broker import free_port

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "plugins"))
from tailfill_airflow.local import PASSWORD, USER, local_env  # noqa: E402

__all__ = ["AirflowServer", "local_airflow"]

COMPONENTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")
FINISHED = {"success", "failed"}


@contextlib.contextmanager
def local_airflow(workdir: Path, pipelines: Path, postgres, dag_ids: Iterable[str],
                  env: dict[str, str] | None = None) -> Iterator[AirflowServer]:
    """An Airflow for the pipeline YAMLs in ``pipelines``, up once each of ``dag_ids`` is parsed and unpaused.

    ``TAILFILL_HOME`` is ``workdir/home``, ``AIRFLOW_HOME`` ``workdir/airflow``; the metadata is in a database
    of its own on ``postgres`` (:class:`tailfill.dev.postgres.LocalPostgres`; its URL is the server's
    ``metadata_url``), so the LocalExecutor runs tasks side by side. ``env`` is added to the test process's
    environment (e.g. ``TAILFILL_SPARK_SLOTS``). Stopped on exit; leftover processes it had to kill are printed.
    """
    database = f"airflow_{uuid.uuid4().hex[:8]}"
    postgres.create_databases(database)
    base = dict(os.environ, TAILFILL_HOME=str(workdir / "home"), TAILFILL_PIPELINES=str(pipelines),
                TAILFILL_AIRFLOW_DB=postgres.url(database),
                # A restarted scheduler looks for tasks its killed predecessor left running every 20 s (not 300 s).
                AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL="20")
    base.update(env or {})
    started = time.monotonic()
    with AirflowServer(workdir / "airflow", env=base) as server:
        server.metadata_url = postgres.url(database)
        print(f"\nAirflow up at {server.url} in {time.monotonic() - started:.0f} s (log {server.log_path})")
        for dag_id in dag_ids:
            server.wait_for_dag(dag_id)
        yield server
    if server.leftovers:
        print(f"killed leftover Airflow processes: {server.leftovers}")


class AirflowError(AssertionError):
    """A run that failed or did not finish in time, with the failed tasks and their logs."""


class AirflowServer:
    """Local Airflow (api-server, scheduler, dag-processor, triggerer) on ``127.0.0.1:<free port>``."""

    def __init__(self, home: Path, env: dict[str, str] | None = None, port: int | None = None,
                 start_timeout: float = 360):  # a hang guard: on a busy machine its four processes start slowly
        self.home = Path(home).absolute()
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.home.parent / f"{self.home.name}.log"
        self.start_timeout = start_timeout
        base = dict(os.environ if env is None else env)
        base["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "plugins"), base.get("PYTHONPATH")) if p)
        self.env = local_env(self.home, self.port, base=base)
        self.marker = f"AIRFLOW_HOME={self.env['AIRFLOW_HOME']}".encode()
        self.proc: subprocess.Popen | None = None
        self.token: str | None = None
        self.leftovers: list[int] = []
        self.metadata_url: str | None = None  # the metadata database's URL, when the caller made it

    # --- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> AirflowServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tailfill_airflow.local", "--port", str(self.port)],
                env=self.env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        try:
            self._wait_healthy()
            self.token = self._login()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after 30 s, then kill anything else with our AIRFLOW_HOME."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
            with contextlib.suppress(ProcessLookupError):  # children that outlived the launcher
                os.killpg(self.proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while processes_with(self.marker) and time.monotonic() < deadline:
                time.sleep(0.3)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            self.proc = None
        self.leftovers = kill_marked(self.marker)
        assert not processes_with(self.marker), "Airflow processes are still running"

    def listening(self) -> list[tuple[int, str, int]]:
        """``(pid, address, port)`` of every TCP socket a process of this Airflow listens on."""
        return listening(self.marker, self.proc.pid if self.proc else None)

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last = "no answer"
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Airflow launcher exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                health = self.request("GET", "/api/v2/monitor/health", auth=False)
                last = json.dumps(health)
                if all(health.get(c, {}).get("status") == "healthy" for c in COMPONENTS):
                    return
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last = repr(exc)
            if time.monotonic() > deadline:
                raise RuntimeError(f"Airflow not healthy within {self.start_timeout:.0f} s (last: {last}); "
                                   f"log {self.log_path}:\n{self.log_tail()}")
            time.sleep(1)

    def _login(self) -> str:
        answer = self.request("POST", "/auth/token", {"username": USER, "password": PASSWORD}, auth=False)
        return answer["access_token"]

    # --- REST -----------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: dict | None = None, *, auth: bool = True,
                params: dict | None = None, timeout: float = 30):
        """JSON in, JSON out; an HTTP error raises ``AirflowError`` with the status and body."""
        url = self.url + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise AirflowError(f"{method} {path} -> {exc.code}: {exc.read()[:2000]!r}") from None

    def get_text(self, url: str, timeout: float = 30) -> tuple[int, str]:
        """``(status, body)`` of a GET of an absolute URL of this Airflow (a plugin page), with the token."""
        assert url.startswith(self.url), f"{url} is not served by {self.url}"
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def extra_links(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict[str, str | None]:
        path = (f"/api/v2/dags/{self._q(dag_id)}/dagRuns/{self._q(run_id)}/taskInstances/{self._q(task_id)}"
                f"/links")
        return self.request("GET", path, params={"map_index": map_index})["extra_links"]

    @staticmethod
    def _q(value: str) -> str:
        return urllib.parse.quote(value, safe="")

    def dag(self, dag_id: str) -> dict:
        return self.request("GET", f"/api/v2/dags/{self._q(dag_id)}")

    def wait_for_dag(self, dag_id: str, timeout: float = 90) -> dict:
        """The DAG once the dag-processor has parsed it, unpaused as a user would (scheduled DAGs come up paused)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                dag = self.dag(dag_id)
                if dag["is_paused"]:
                    dag = self.request("PATCH", f"/api/v2/dags/{self._q(dag_id)}", {"is_paused": False})
                if not dag["is_paused"]:
                    return dag
            except AirflowError as exc:
                if "-> 404" not in str(exc):
                    raise
            if time.monotonic() > deadline:
                errors = self.request("GET", "/api/v2/importErrors")
                raise AirflowError(f"DAG {dag_id} not available within {timeout:.0f} s; import errors: "
                                   f"{json.dumps(errors)[:3000]}\n{self.log_tail(3000)}")
            time.sleep(1)

    def trigger_dag(self, dag_id: str, conf: dict | None = None) -> str:
        run = self.request("POST", f"/api/v2/dags/{self._q(dag_id)}/dagRuns",
                           {"logical_date": None, "conf": conf or {}})
        return run["dag_run_id"]

    def dag_run(self, dag_id: str, run_id: str) -> dict:
        return self.request("GET", f"/api/v2/dags/{self._q(dag_id)}/dagRuns/{self._q(run_id)}")

    def dag_runs(self, dag_id: str) -> list[dict]:
        return self.request("GET", f"/api/v2/dags/{self._q(dag_id)}/dagRuns",
                            params={"limit": 100, "order_by": "-run_after"})["dag_runs"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        path = f"/api/v2/dags/{self._q(dag_id)}/dagRuns/{self._q(run_id)}/taskInstances"
        return self.request("GET", path, params={"limit": 1000})["task_instances"]

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1):
        """A task's XCom value (what a ``@task`` returned, by default)."""
        path = (f"/api/v2/dags/{self._q(dag_id)}/dagRuns/{self._q(run_id)}/taskInstances/{self._q(task_id)}"
                f"/xcomEntries/{self._q(key)}")
        value = self.request("GET", path, params={"map_index": map_index})["value"]
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return json.loads(value)
        return value

    def task_log(self, ti: dict, max_lines: int = 80) -> str:
        """The last lines of a task instance's log (its latest try), or why they could not be read."""
        path = (f"/api/v2/dags/{self._q(ti['dag_id'])}/dagRuns/{self._q(ti['dag_run_id'])}/taskInstances/"
                f"{self._q(ti['task_id'])}/logs/{max(ti['try_number'], 1)}")
        try:
            content = self.request("GET", path, params={"map_index": ti["map_index"], "full_content": "true"})
        except AirflowError as exc:
            return f"(log not available: {exc})"
        lines = []
        for entry in content.get("content", []):
            if isinstance(entry, dict):
                text = " ".join(str(entry[k]) for k in ("timestamp", "level", "event") if entry.get(k))
                for exc in entry.get("error_detail") or ():
                    if not isinstance(exc, dict):
                        text += f"\n    {exc}"
                        continue
                    frame = (exc.get("frames") or [{}])[-1]
                    text += (f"\n    {exc.get('exc_type')}: {exc.get('exc_value')}"
                             f" (at {frame.get('filename')}:{frame.get('lineno')})")
                lines.append(text)
            else:
                lines.append(str(entry))
        return "\n".join(lines[-max_lines:])

    def new_runs(self, dag_id: str, before: set[str], timeout: float = 30) -> list[dict]:
        """The runs of ``dag_id`` whose ids are not in ``before``, once there is one (``AirflowError`` after
        ``timeout``): the run a trigger form made."""
        deadline = time.monotonic() + timeout
        while not (new := [r for r in self.dag_runs(dag_id) if r["dag_run_id"] not in before]):
            if time.monotonic() > deadline:
                raise AirflowError(f"no new run of {dag_id} within {timeout:.0f} s")
            time.sleep(1)
        return new

    def wait_for_end(self, dag_id: str, run_id: str, timeout: float = 240, poll: float = 2) -> dict:
        """Poll the run until it ends, ``success`` or ``failed`` (returned), or times out (``AirflowError``)."""
        deadline = time.monotonic() + timeout
        while (run := self.dag_run(dag_id, run_id))["state"] not in FINISHED:
            if time.monotonic() > deadline:
                raise AirflowError(f"{dag_id} run {run_id} not finished after {timeout:.0f} s:\n"
                                   f"{self.describe_run(dag_id, run_id)}")
            time.sleep(poll)
        return run

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 600, poll: float = 3) -> dict:
        """Poll the run until it is ``success`` (returned) or ``failed``/timed out (``AirflowError``)."""
        run = self.wait_for_end(dag_id, run_id, timeout, poll)
        if run["state"] == "failed":
            raise AirflowError(f"{dag_id} run {run_id} failed:\n{self.describe_run(dag_id, run_id)}")
        return run

    def describe_run(self, dag_id: str, run_id: str) -> str:
        tis = self.task_instances(dag_id, run_id)
        lines = ["task states: " + ", ".join(f"{t['task_id']}[{t['map_index']}]={t['state']}" for t in tis)]
        for ti in tis:
            if ti["state"] in ("failed", "up_for_retry"):
                lines.append(f"--- {ti['state']} task {ti['task_id']} map_index={ti['map_index']} "
                             f"try={ti['try_number']} id={ti['id']}:\n{self.task_log(ti)}")
        lines.append(f"--- airflow log tail ({self.log_path}):\n{self.log_tail(3000)}")
        return "\n".join(lines)


def text_of(body: str) -> str:
    """A page's text as a reader sees it (no style, no tags, HTML entities read)."""
    body = re.sub(r"<style>.*?</style>", "", body, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)))
