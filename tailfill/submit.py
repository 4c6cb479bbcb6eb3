"""Build and run the ``spark-submit`` command for the ingest job (no pyspark import here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import tailfill

REPO = Path(tailfill.__file__).resolve().parent.parent
RESULT_PREFIX = "TAILFILL_RESULT "


def job_file() -> Path:
    """``spark_jobs/ingest.py`` in a checkout; the packaged module when installed elsewhere."""
    entry = REPO / "spark_jobs" / "ingest.py"
    return entry if entry.exists() else Path(tailfill.__file__).parent / "spark" / "job.py"


def spark_submit_command(job_args: list[str], master: str | None = None) -> list[str]:
    """The full command: loopback-bound driver, quiet logging, this interpreter for workers."""
    submit = Path(sys.executable).parent / "spark-submit"
    log4j = REPO / "spark_jobs" / "log4j2.properties"
    cmd = [
        str(submit) if submit.exists() else "spark-submit",
        "--master", master or os.environ.get("TAILFILL_SPARK_MASTER", "local[2]"),
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.ui.showConsoleProgress=false",
        "--conf", "spark.sql.session.timeZone=UTC",
    ]
    if log4j.exists():
        cmd += ["--driver-java-options", f"-Dlog4j.configurationFile={log4j}"]
    return [*cmd, str(job_file()), *job_args]


def submit_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "AWS_EC2_METADATA_DISABLED": "true",
    })
    return env


def run_job(job_args: list[str]) -> tuple[int, list[dict]]:
    """Run the job, streaming its stderr (progress) through; returns (exit code, results)."""
    proc = subprocess.Popen(spark_submit_command(job_args), env=submit_env(), stdout=subprocess.PIPE, text=True)
    results: list[dict] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(RESULT_PREFIX):
            results = json.loads(line[len(RESULT_PREFIX):])
        else:
            sys.stdout.write(line)
    return proc.wait(), results
