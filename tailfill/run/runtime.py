"""The one definition of how Spark runs for Tailfill: its settings, its environment, its files.

Used by the in-process session, by ``spark-submit`` (CLI and Airflow alike) and by the local
Airflow launcher, so that none of them can drift from the others. Spark binds to loopback unless
``TAILFILL_SPARK_DRIVER_HOST`` names a host that a cluster's executors can reach.
"""

from __future__ import annotations

import os
import sys
import zipfile
from importlib import resources
from pathlib import Path

import tailfill

LOOPBACK = "127.0.0.1"
DEFAULT_MASTER = "local[2]"
JOBS_PACKAGE = "tailfill.spark_jobs"  # the repo's spark_jobs/ folder, installed as package data
# The driver JVM plans micro-batches and moves one small row per offset range; the records never
# pass through it. So it gains nothing from C2's optimising compiler or a parallel collector, and
# both cost CPU the executors' Python workers need (measured: 14 → 7.6 CPU-s for a 1M backfill).
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def package_file(package: str, name: str) -> Path:
    """A file shipped inside a package (installed or editable), as a filesystem path."""
    return Path(str(resources.files(package) / name))


def job_file() -> Path:
    """The ingest job that ``spark-submit`` runs."""
    return package_file(JOBS_PACKAGE, "ingest.py")


def log4j_file() -> Path:
    return package_file(JOBS_PACKAGE, "log4j2.properties")


def spark_submit() -> str:
    """``spark-submit`` beside this interpreter (the pyspark wheel's), else the one on PATH."""
    beside = Path(sys.executable).parent / "spark-submit"
    return str(beside) if beside.exists() else "spark-submit"


def master() -> str:
    """The Spark master: ``TAILFILL_SPARK_MASTER``, else ``local[2]``."""
    return os.environ.get("TAILFILL_SPARK_MASTER", DEFAULT_MASTER)


def spark_conf() -> dict[str, str]:
    """Spark settings for every Tailfill driver: loopback-bound, UTC, quiet, Python workers reused."""
    host = os.environ.get("TAILFILL_SPARK_DRIVER_HOST", LOOPBACK)
    return {
        "spark.driver.host": host,
        "spark.driver.bindAddress": LOOPBACK if host == LOOPBACK else "0.0.0.0",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        "spark.python.worker.reuse": "true",
        "spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile={log4j_file()} {JVM_OPTIONS}",
    }


def spark_env() -> dict[str, str]:
    """Environment for Spark processes: loopback only, workers on this interpreter, no cloud metadata."""
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    return {
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", LOOPBACK),
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        "AWS_EC2_METADATA_DISABLED": "true",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def code_archive(dest: Path) -> Path:
    """A zip of the installed ``tailfill`` package, shipped to executors with ``--py-files``."""
    package = Path(tailfill.__file__).parent
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(package.rglob("*.py")):
            zf.write(path, path.relative_to(package.parent))
    tmp.replace(dest)
    return dest
