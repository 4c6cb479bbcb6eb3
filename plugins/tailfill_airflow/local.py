"""Run Airflow locally for tailfill: api-server, scheduler, dag-processor and triggerer on loopback.

    PYTHONPATH=plugins .venv/bin/python -m tailfill_airflow.local [--port 8080]

Starts Airflow's components one by one (not ``airflow standalone``) with this project's DAGs and
plugins, the ``spark_default`` connection on ``local[2]``, this home's Spark Connect server with the
``spark_connect_default`` connection to it (ingest jobs run there), and the simple auth manager with the
login ``admin`` / ``admin``. Nothing listens beyond loopback: the API server binds 127.0.0.1, and
the task and trigger log servers, which Airflow's scheduler and triggerer would bind on every
interface (``serve_logs`` has no host setting), are started here on 127.0.0.1 instead, with the
components' host name set to 127.0.0.1 so that the API server finds them. Metadata is on Postgres
with the LocalExecutor, so that mapped backfill lanes really run side by side: the database named
by ``TAILFILL_AIRFLOW_DB`` (a SQLAlchemy URL), else a local Postgres
(:class:`tailfill.dev.postgres.LocalPostgres`) kept in ``$AIRFLOW_HOME/postgres`` (``$AIRFLOW_HOME``
defaults to ``.tailfill/airflow``), started on a free loopback port and stopped when Airflow stops,
and the ``tailfill_spark`` pool with ``$TAILFILL_SPARK_SLOTS`` slots (4 unless set: the form's three
backfill lanes beside one incremental run). When a pipeline reads the embedded broker, the broker of
``$TAILFILL_HOME`` is started unless it runs (with its kept topics: the demo's events are there for the
backfill form) and stopped with Airflow.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from tailfill.config import EMBEDDED
from tailfill.dev.broker import broker_down, broker_up, describe_storage, free_port
from tailfill.errors import ConfigError, TailfillError
from tailfill.pipeline.load import load_pipeline, pipeline_files
from tailfill.run import runtime
from tailfill.run.connect_server import connect_server_down, connect_server_up
from tailfill.run.server_settings import MODE_ENV
from tailfill.settings import settings
from tailfill.source.embedded import broker_state
from tailfill_airflow.local_stop import launcher_pid, stop_launcher
from tailfill_airflow.naming import SLOTS_ENV, SPARK_POOL, spark_slots

REPO = Path(__file__).resolve().parents[2]
USER, PASSWORD = "admin", "admin"


def local_env(airflow_home: Path, port: int, base: dict[str, str] | None = None,
              database_url: str | None = None) -> dict[str, str]:
    """The environment for every Airflow process of the local setup.

    With ``database_url`` (Postgres) the metadata lives there and tasks run in parallel on the
    LocalExecutor; without it, Airflow's SQLite default (enough for ``airflow dags test``).
    The scheduler's and triggerer's log servers get free ports, so that several local Airflows
    (a developer's and the tests') never collide on the fixed defaults 8793/8794.
    """
    airflow_home.mkdir(parents=True, exist_ok=True)
    passwords = airflow_home / "passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD}))
    env = dict(os.environ if base is None else base)
    env.update({
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__AUTH_MANAGER":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        # An idle scheduler looks again after 0.25 s, not 1 s: each task of a run waits for a loop to be queued
        # and another to have its successors queued.
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": env.get("AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME",
                                                                 "0.25"),
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        # The log servers listen on loopback only (:func:`serve_logs`): tasks and triggers say they ran there.
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "tailfill_airflow.local.loopback_hostname",
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(p for p in (str(REPO / "plugins"), env.get("PYTHONPATH")) if p)),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "TAILFILL_PIPELINES": env.get("TAILFILL_PIPELINES", str(REPO / "pipelines")),
        SLOTS_ENV: str(spark_slots(env)),
        # Ingest jobs run on this home's Spark Connect server (started with Airflow, stopped with it), reached
        # through the spark_connect_default connection (:func:`connect_up`).
        MODE_ENV: env.get(MODE_ENV, "auto"),
        **runtime.spark_env(),
    })
    for key in ("WORKER", "TRIGGER"):  # kept when the caller chose them (a test that asks these servers)
        env.setdefault(f"AIRFLOW__LOGGING__{key}_LOG_SERVER_PORT", str(free_port()))
    # One secret for every component started together (a fresh AIRFLOW_HOME has no airflow.cfg yet).
    env.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", secrets.token_urlsafe(32))
    env.setdefault("AIRFLOW__API__SECRET_KEY", secrets.token_urlsafe(32))
    if database_url:
        env.update({"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
                    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                    # One idle worker process per slot: enough for a few lanes side by side on a laptop.
                    "AIRFLOW__CORE__PARALLELISM": "8"})
    return env


COMPONENTS = (["api-server"], ["scheduler", "--skip-serve-logs"], ["dag-processor"],
              ["triggerer", "--skip-serve-logs"])


def component_command(airflow: str, component: list[str], preload: bool) -> list[str]:
    """The command that starts one component: ``airflow <component>``; the scheduler, when ``preload``, through
    :mod:`tailfill_airflow.preload`, so that the task processes its LocalExecutor forks start with the task
    modules imported."""
    if preload and component[0] == "scheduler":
        return [sys.executable, "-m", "tailfill_airflow.preload", *component]
    return [airflow, *component]


def loopback_hostname() -> str:
    """``[core] hostname_callable`` of the local setup: every component runs, and serves its logs, on loopback."""
    return "127.0.0.1"


def serve_logs(port: int) -> None:
    """Airflow's log server (task or trigger logs) on ``127.0.0.1:port``: the same app the scheduler and
    triggerer start, which they would bind on every interface."""
    import uvicorn

    uvicorn.run("airflow.utils.serve_logs.log_server:get_app", host="127.0.0.1", port=port, log_config=None,
                access_log=False)


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    """One component in a session of its own, so that stopping it stops the processes it started."""
    return subprocess.Popen(args, env=env, start_new_session=True)


def _stop_all(procs: list[subprocess.Popen], grace_s: float = 15) -> None:
    """SIGTERM each component's process group, SIGKILL whatever is left of them after ``grace_s``."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    time.sleep(1)  # the task runners and JVMs a component started, leaving a moment after it
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _stop_on_sigterm(*_: object) -> None:
    raise KeyboardInterrupt  # unwinds through the ``finally`` that stops Airflow and Postgres


def main() -> None:
    try:
        port = settings().airflow_port  # a bad TAILFILL_* setting is one line, before anything starts
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--serve-logs", type=int, metavar="PORT", help="run only a log server on 127.0.0.1:PORT")
    parser.add_argument("--stop", action="store_true", help="stop the local Airflow of $AIRFLOW_HOME (started by "
                        "`make airflow`) and everything it started; return once all of it has stopped")
    args = parser.parse_args()
    if args.serve_logs:
        serve_logs(args.serve_logs)
        return
    home = Path(os.environ.get("AIRFLOW_HOME", REPO / ".tailfill" / "airflow")).absolute()
    if args.stop:
        print(stop_launcher(home), flush=True)
        return
    airflow = str(Path(sys.executable).parent / "airflow")
    signal.signal(signal.SIGTERM, _stop_on_sigterm)  # `make airflow-stop` or a kill: the stop of Ctrl-C
    with contextlib.ExitStack() as stack:
        home.mkdir(parents=True, exist_ok=True)
        stack.enter_context(launcher_pid(home))  # removed last, once everything below has stopped
        url = settings().airflow_db
        if not url:
            from tailfill.dev.postgres import LocalPostgres

            postgres = stack.enter_context(LocalPostgres(home / "postgres", free_port(), databases=("airflow",)))
            url = postgres.url("airflow")
            print(f"Postgres for Airflow's metadata: {url} (data {postgres.data_dir})", flush=True)
        env = local_env(home, args.port, database_url=url)
        print(f"Airflow UI: http://127.0.0.1:{args.port}  login {USER} / {PASSWORD}  (AIRFLOW_HOME={home})",
              flush=True)
        create_pool(airflow, env)
        stack.callback(_embedded_broker_up())
        if env[MODE_ENV] in ("auto", "connect"):
            env.update(connect_up(env))
        procs: list[subprocess.Popen] = []
        try:
            for key in ("WORKER", "TRIGGER"):
                port = env[f"AIRFLOW__LOGGING__{key}_LOG_SERVER_PORT"]
                procs.append(_start([sys.executable, "-m", "tailfill_airflow.local", "--serve-logs", port], env))
            preload = settings(env).airflow_preload
            procs += [_start(component_command(airflow, component, preload), env) for component in COMPONENTS]
            while all(p.poll() is None for p in procs):  # one component gone: stop the others too
                time.sleep(1)
            sys.exit(next(p.returncode for p in procs if p.returncode is not None))
        except KeyboardInterrupt:
            pass
        finally:
            _stop_all(procs)
            if connect_server_down():
                print("Spark Connect server stopped", flush=True)


def connect_up(env: dict[str, str]) -> dict[str, str]:
    """Start this home's Spark Connect server with the tasks' environment; the ``spark_connect_default``
    connection that points at it (empty when it could not start: tasks then choose for themselves)."""
    try:
        state = connect_server_up(env=env)
    except Exception as exc:  # auto runs the jobs through spark-submit then, and says so in each task's log
        print(f"Spark Connect server not started ({exc})", flush=True)
        return {}
    print(f"Spark Connect server up: {state['url']} (pid {state['pid']})", flush=True)
    return {"AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": json.dumps(
        {"conn_type": "spark_connect", "host": runtime.LOOPBACK, "port": state["port"]})}


def _uses_embedded_broker() -> bool:
    """Whether a pipeline of the pipelines folder reads the embedded broker (files that do not load are skipped:
    the DAG processor reports them)."""
    for path in pipeline_files():
        with contextlib.suppress(TailfillError):
            if load_pipeline(path).source.bootstrap_servers == EMBEDDED:
                return True
    return False


def _embedded_broker_up():
    """Start the embedded broker of this home when a pipeline reads it and it is not running (its topics and port
    are kept across restarts, so the demo's events are there for the backfill form); returns what stops it again
    (nothing when this did not start it)."""
    if broker_state() is not None or not _uses_embedded_broker():
        return lambda: None
    try:
        state = broker_up()
    except TailfillError as exc:  # pipelines on a real Kafka do not need it
        print(f"embedded broker not started ({exc})", flush=True)
        return lambda: None
    print(f"embedded broker: {state['bootstrap_servers']} ({describe_storage(state)}); stopped with Airflow",
          flush=True)
    return broker_down


def create_pool(airflow: str, env: dict[str, str]) -> None:
    """Migrate the metadata database and create (or resize) the Spark pool every Tailfill DAG uses."""
    for args in (["db", "migrate"],
                 ["pools", "set", SPARK_POOL, env[SLOTS_ENV], "spark-submit jobs of Tailfill (one slot each)"]):
        proc = subprocess.run([airflow, *args], env=env, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"airflow {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


if __name__ == "__main__":
    main()
