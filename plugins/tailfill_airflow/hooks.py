"""``TailfillHook``: the connections and environment a pipeline's Spark job needs."""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

from airflow.sdk import BaseHook

import tailfill
from tailfill.config import PipelineConfig, tailfill_home
from tailfill.submit import REPO

JOB = str(REPO / "spark_jobs" / "ingest.py")
LOG4J = REPO / "spark_jobs" / "log4j2.properties"


class TailfillHook(BaseHook):
    """Builds the Spark submission environment; secrets come only from Airflow connections or env.

    A pipeline's ``source.security.airflow_conn_id`` names the connection holding the Kafka
    login and password; they reach the job as the environment variables the pipeline names.
    """

    def __init__(self, cfg: PipelineConfig):
        super().__init__()
        self.cfg = cfg

    def env_vars(self) -> dict[str, str]:
        """Environment for spark-submit: state location, interpreter, loopback, credentials."""
        env = {
            "TAILFILL_HOME": str(tailfill_home()),
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "AWS_EC2_METADATA_DISABLED": "true",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        for name in ("TAILFILL_PIPELINES", "TAILFILL_BOOTSTRAP_SERVERS", "TAILFILL_CATALOG_URI",
                     "TAILFILL_S3_ENDPOINT", "SPARK_LOCAL_IP", "JAVA_HOME"):
            if name in os.environ:
                env[name] = os.environ[name]
        if self.cfg.target.s3 is not None:
            for name in (self.cfg.target.s3.access_key_env, self.cfg.target.s3.secret_key_env):
                if name in os.environ:
                    env[name] = os.environ[name]
        sec = self.cfg.source.security
        if sec.airflow_conn_id:
            # Resolved when the task runs (never at parse time), and masked in logs and the UI.
            env[sec.username_env or "TAILFILL_KAFKA_USERNAME"] = f"{{{{ conn[{sec.airflow_conn_id!r}].login }}}}"
            env[sec.password_env or "TAILFILL_KAFKA_PASSWORD"] = f"{{{{ conn[{sec.airflow_conn_id!r}].password }}}}"
        else:
            for name in (sec.username_env, sec.password_env):
                if name and name in os.environ:
                    env[name] = os.environ[name]
        return env

    @staticmethod
    def spark_conf() -> dict[str, str]:
        """Driver on loopback unless TAILFILL_SPARK_DRIVER_HOST names a host executors can reach."""
        host = os.environ.get("TAILFILL_SPARK_DRIVER_HOST", "127.0.0.1")
        conf = {
            "spark.driver.host": host,
            "spark.driver.bindAddress": "127.0.0.1" if host == "127.0.0.1" else "0.0.0.0",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
        }
        if LOG4J.exists():
            conf["spark.driver.extraJavaOptions"] = f"-Dlog4j.configurationFile={LOG4J}"
        return conf

    @staticmethod
    def code_archive() -> str:
        """A zip of the tailfill package, shipped to executors with ``--py-files``."""
        dest = tailfill_home() / "dist" / f"tailfill-{tailfill.__version__}.zip"
        dest.parent.mkdir(parents=True, exist_ok=True)
        package = Path(tailfill.__file__).parent
        tmp = dest.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(package.rglob("*.py")):
                zf.write(path, path.relative_to(package.parent))
        tmp.replace(dest)
        return str(dest)
