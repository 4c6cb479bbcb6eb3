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
