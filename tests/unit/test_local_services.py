"""The local Airflow launcher's settings and the local Postgres helper's errors (no server started)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tailfill.dev.postgres import LocalPostgres, PostgresError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins"))
from tailfill_airflow.local import local_env

URL = "postgresql+psycopg2://tailfill@127.0.0.1:5999/airflow"


def test_airflow_on_postgres_runs_the_local_executor(tmp_path):
    env = local_env(tmp_path / "airflow", 8080, base={}, database_url=URL)
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == URL
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert int(env["AIRFLOW__CORE__PARALLELISM"]) >= 2  # lanes side by side


def test_without_a_database_airflow_keeps_its_default(tmp_path):
    env = local_env(tmp_path / "airflow", 8080, base={})
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in env
    assert "AIRFLOW__CORE__EXECUTOR" not in env


def test_postgres_url_names_the_loopback_server(tmp_path):
    assert LocalPostgres(tmp_path / "pg", 5999).url("airflow") == URL


def test_missing_postgres_binaries_are_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_POSTGRES_BIN", str(tmp_path / "nowhere"))
    with pytest.raises(PostgresError, match=r"TAILFILL_POSTGRES_BIN=.*: no pg_ctl there") as err:
        LocalPostgres(tmp_path / "pg", 5999).start()
    assert "\n" not in str(err.value)


def test_the_log_servers_are_reached_on_loopback_at_ports_the_caller_may_choose(tmp_path):
    """The components say they run on 127.0.0.1, where the launcher's log servers listen."""
    from importlib import import_module

    env = local_env(tmp_path / "airflow", 8080, base={"AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": "40001"})
    module, _, name = env["AIRFLOW__CORE__HOSTNAME_CALLABLE"].rpartition(".")
    assert getattr(import_module(module), name)() == "127.0.0.1"
    assert env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] == "40001"
    assert env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"].isdigit()
    again = local_env(tmp_path / "airflow", 8080, base=env)  # the launcher's own call keeps the test's values
    assert {k: again[k] for k in env if "LOG_SERVER" in k or "SECRET" in k} == \
        {k: env[k] for k in env if "LOG_SERVER" in k or "SECRET" in k}


def test_embedded_services_that_are_not_running_are_named_with_their_command(tmp_path, monkeypatch):
    from tailfill.errors import BrokerError, RegistryError
    from tailfill.source.embedded import resolve_bootstrap, resolve_registry

    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    assert resolve_bootstrap("127.0.0.1:9092") == "127.0.0.1:9092"
    with pytest.raises(BrokerError, match=r"embedded broker, but none is running .*\(fix: run `tailfill broker up`\)"):
        resolve_bootstrap("embedded")
    with pytest.raises(RegistryError, match=r"development Schema Registry, but none .*`tailfill registry up`"):
        resolve_registry("embedded")
