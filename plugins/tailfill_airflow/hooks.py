"""``TailfillHook``: a pipeline's connections (its Kafka login, its Spark master) and its Spark job's environment.

Like the apache-spark provider's ``SparkSubmitHook``, the hook names its connection attribute
(``conn_name_attr``) and reads the connection with ``get_connection`` when a task runs, never when
the DAG is parsed. The login reaches the consumer two ways: as environment variables of the
``spark-submit`` it feeds (:class:`~tailfill_airflow.operators.TailfillSubmitOperator`), and in the
worker's own environment for tasks that talk to the broker themselves (plan, preflight).

Every secret Tailfill knows of in an Airflow process — the connection's password, the values of
the pipeline's secret ``*_env`` variables, the password inside its catalog URI — goes to Airflow's
secrets masker (:func:`tailfill.redact.add_listener`), so task logs show ``***`` for it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from tailfill.config import PipelineConfig
from tailfill.errors import ConfigError
from tailfill.redact import add_listener, register_model_secrets, register_secret, uri_password
from tailfill.run import runtime
from tailfill.settings import settings

add_listener(mask_secret)  # what Tailfill registers (pipelines as they load, the hook's values) Airflow masks

# Settings a job inherits from the Airflow worker when they are set there.
PASSED_THROUGH = ("TAILFILL_PIPELINES", "TAILFILL_BOOTSTRAP_SERVERS", "TAILFILL_CATALOG_URI", "TAILFILL_S3_ENDPOINT",
                  "TAILFILL_SPARK_DRIVER_HOST", "TAILFILL_SCHEMA_REGISTRY_URL", "JAVA_HOME")


class TailfillHook(BaseHook):
    """Reads a pipeline's Kafka login from its Airflow connection (``source.security.airflow_conn_id``), and
    its Schema Registry's from ``format.schema_registry.airflow_conn_id``."""

    conn_name_attr = "kafka_conn_id"
    default_conn_name = "kafka_default"
    conn_type = "generic"
    hook_name = "Tailfill Kafka login"

    def __init__(self, cfg: PipelineConfig, kafka_conn_id: str | None = None):
        super().__init__()
        self.cfg = cfg
        self.kafka_conn_id = kafka_conn_id or cfg.source.security.airflow_conn_id

    def credentials_env(self) -> dict[str, str]:
        """``{username variable: login, password variable: password}`` from the connection, read now.

        Empty when the pipeline does not authenticate with SASL or names no connection (its
        ``*_env`` variables are then read from the environment as they are).
        """
        out: dict[str, str] = {}
        names = self.cfg.source.security.credential_env
        if names is not None and self.kafka_conn_id:
            out.update(self._login(self.kafka_conn_id, names, "source.security.airflow_conn_id"))
        registry = self.cfg.format.schema_registry  # the Schema Registry's login, when it names a connection
        if registry is not None and registry.airflow_conn_id and registry.credential_env:
            out.update(self._login(registry.airflow_conn_id, registry.credential_env,
                                   "format.schema_registry.airflow_conn_id"))
        return out

    def _login(self, conn_id: str, names: tuple[str, str], setting: str) -> dict[str, str]:
        conn = self.get_connection(conn_id)
        if not conn.login or not conn.password:
            raise ConfigError(f"Airflow connection {conn_id!r} ({setting} of pipeline {self.cfg.name}) needs a "
                              "login and a password")
        mask_secret(conn.password)  # whatever its length (Tailfill's own redaction skips very short values)
        register_secret(conn.password)
        return {names[0]: conn.login, names[1]: conn.password}

    def spark_master(self, conn_id: str = "spark_default") -> str:
        """The Spark master of the connection ``conn_id``, as the Spark provider reads it: its host when that is a
        whole master URL (``local[2]``, ``k8s://https://...``), else ``<conn type>://<host>``, with its port. Without
        the connection: Tailfill's own (``TAILFILL_SPARK_MASTER``, else ``local[2]``)."""
        try:
            conn = self.get_connection(conn_id)
        except Exception:  # not defined: Airflow says so in its own words; Tailfill's default applies
            return runtime.master()
        if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
            master = conn.host
        else:
            master = f"{conn.conn_type}://{conn.host or ''}"
        return f"{master}:{conn.port}" if conn.port else master

    def connect_url(self, conn_id: str = "spark_connect_default") -> str | None:
        """The ``sc://`` address of the Spark Connect connection ``conn_id``, as the Spark provider's
        ``SparkConnectHook`` builds it (host, port, user id, token, SSL); None when it is not defined. Its
        token goes to the secrets maskers."""
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        try:
            conn = self.get_connection(conn_id)
        except Exception:  # not defined: Airflow says so in its own words; Tailfill's own choice applies
            return None
        if conn.password:
            mask_secret(conn.password)
            register_secret(conn.password)
        return SparkConnectHook(conn_id).get_connection_url()

    def job_env(self) -> dict[str, str]:
        """Environment for the pipeline's ``spark-submit``: state, Spark runtime, credentials."""
        env = {"TAILFILL_HOME": str(settings().home), **runtime.spark_env()}
        names = [*PASSED_THROUGH]
        if self.cfg.target.s3 is not None:
            names += [self.cfg.target.s3.access_key_env, self.cfg.target.s3.secret_key_env]
        names += self.cfg.source.security.credential_env or ()
        if self.cfg.format.schema_registry is not None:
            names += self.cfg.format.schema_registry.credential_env or ()
        env.update({n: os.environ[n] for n in names if n in os.environ})
        env.update(self.credentials_env())
        register_model_secrets(self.cfg, env)  # S3's secret key, the Kafka password, the catalog URI's password
        for value in env.values():  # a URI passed through (TAILFILL_CATALOG_URI) may carry a password
            register_secret(uri_password(value))
        return env

    @contextlib.contextmanager
    def credentials_exported(self) -> Iterator[None]:
        """The Kafka login in this process's environment for the duration (worker-side tasks)."""
        creds = self.credentials_env()
        saved = {k: os.environ.get(k) for k in creds}
        os.environ.update(creds)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
