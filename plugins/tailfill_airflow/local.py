"""Run Airflow locally for tailfill: api-server, scheduler, dag-processor and triggerer on loopback.

    PYTHONPATH=plugins .venv/bin/python -m tailfill_airflow.local [--port 8080]

Uses ``airflow standalone`` with this project's DAGs and plugins, DAGs unpaused, the
``spark_default`` connection on ``local[2]``, and the simple auth manager with the login
``admin`` / ``admin``. Metadata is on Postgres with the LocalExecutor, so that mapped backfill
lanes really run side by side: the database named by ``TAILFILL_AIRFLOW_DB`` (a SQLAlchemy URL),
else a local Postgres (:class:`tailfill.dev.postgres.LocalPostgres`) kept in
``$AIRFLOW_HOME/postgres`` (``$AIRFLOW_HOME`` defaults to ``.tailfill/airflow``), started on a free
loopback port and stopped when Airflow stops, and the
``tailfill_spark`` pool with ``$TAILFILL_SPARK_SLOTS`` slots (4 unless set: the form's three
backfill lanes beside one incremental run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tailfill.dev.broker import free_port
from tailfill.run import runtime
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
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "TAILFILL_PIPELINES": env.get("TAILFILL_PIPELINES", str(REPO / "pipelines")),
        SLOTS_ENV: str(spark_slots(env)),
        **runtime.spark_env(),
    })
    if database_url:
        env.update({"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
                    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                    # One idle worker process per slot: enough for a few lanes side by side on a laptop.
                    "AIRFLOW__CORE__PARALLELISM": "8"})
    return env


def _stop_group(proc: subprocess.Popen, grace_s: float = 15) -> None:
    """SIGTERM the process group of ``proc``, SIGKILL whatever is left of it after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    time.sleep(1)  # components that outlive the standalone parent by a moment
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _stop_on_sigterm(*_: object) -> None:
    raise KeyboardInterrupt  # unwinds through the ``finally`` that stops Airflow and Postgres


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("TAILFILL_AIRFLOW_PORT", 8080)))
    args = parser.parse_args()
    home = Path(os.environ.get("AIRFLOW_HOME", REPO / ".tailfill" / "airflow")).absolute()
    airflow = str(Path(sys.executable).parent / "airflow")
    with contextlib.ExitStack() as stack:
        url = os.environ.get("TAILFILL_AIRFLOW_DB")
        if not url:
            from tailfill.dev.postgres import LocalPostgres

            home.mkdir(parents=True, exist_ok=True)
            postgres = stack.enter_context(LocalPostgres(home / "postgres", free_port(), databases=("airflow",)))
            url = postgres.url("airflow")
            print(f"Postgres for Airflow's metadata: {url} (data {postgres.data_dir})", flush=True)
        env = local_env(home, args.port, database_url=url)
        print(f"Airflow UI: http://127.0.0.1:{args.port}  login {USER} / {PASSWORD}  (AIRFLOW_HOME={home})",
              flush=True)
        create_pool(airflow, env)
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
        # Its own process group: on stop, every Airflow component goes, before Postgres does.
        proc = subprocess.Popen([airflow, "standalone"], env=env, start_new_session=True)
        try:
            sys.exit(proc.wait())
        except KeyboardInterrupt:
            _stop_group(proc)


def create_pool(airflow: str, env: dict[str, str]) -> None:
    """Migrate the metadata database and create (or resize) the Spark pool every Tailfill DAG uses."""
    for args in (["db", "migrate"],
                 ["pools", "set", SPARK_POOL, env[SLOTS_ENV], "spark-submit jobs of Tailfill (one slot each)"]):
        proc = subprocess.run([airflow, *args], env=env, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"airflow {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


if __name__ == "__main__":
    main()
