"""The ingest job through ``spark-submit``: its command line and its environment. No pyspark here.

The job's arguments are its :class:`~tailfill.run.contract.JobSpec` (``spec.argv()``); what it prints
is read back by :func:`~tailfill.run.contract.read_event`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterable
from typing import TextIO

from tailfill.errors import ConfigError
from tailfill.redact import redact_text
from tailfill.run import runtime
from tailfill.run.contract import RESULT_PREFIX, IngestResult, JobSpec, parse_result


def parse_conf(pairs: list[str] | None) -> dict[str, str]:
    """``KEY=VALUE`` Spark settings, as ``spark-submit --conf`` takes them; a malformed one is an error."""
    conf: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or key != key.strip():
            raise ConfigError(f"--conf {pair!r}: expected KEY=VALUE (fix: e.g. --conf spark.executor.memory=2g)")
        conf[key] = value
    return conf


def spark_submit_command(spec: JobSpec, master: str | None = None, conf: dict[str, str] | None = None) -> list[str]:
    """The full ``spark-submit`` command for ``spec``, shipping the tailfill code to the executors.

    ``master`` defaults to :func:`runtime.master`; ``conf`` is laid over Tailfill's Spark settings
    (:func:`runtime.spark_conf`). Builds the ``--py-files`` archive (:func:`runtime.code_archive`),
    so executors need only tailfill's dependencies, never tailfill itself.
    """
    cmd = [runtime.spark_submit(), "--master", master or runtime.master()]
    for key, value in (runtime.spark_conf() | (conf or {})).items():
        cmd += ["--conf", f"{key}={value}"]
    cmd += ["--py-files", str(runtime.code_archive())]
    return [*cmd, str(runtime.job_file()), *spec.argv()]


def submit_env() -> dict[str, str]:
    """This process's environment with Tailfill's Spark environment and shipped code on top."""
    return {**os.environ, **runtime.spark_env(), **runtime.shipped_code_env()}


def _relay(lines: Iterable[str], out: TextIO) -> None:
    for line in lines:
        out.write(redact_text(line))
        out.flush()


def run_job(spec: JobSpec, master: str | None = None,
            conf: dict[str, str] | None = None) -> tuple[int, list[IngestResult]]:
    """Run the job (see :func:`spark_submit_command`), streaming its progress through; returns (exit code, results).

    Both of the job's streams are relayed line by line with secrets redacted (Spark and the JVM
    print exception texts that may quote a setting).
    """
    proc = subprocess.Popen(spark_submit_command(spec, master, conf), env=submit_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace")
    assert proc.stdout is not None and proc.stderr is not None
    errors = threading.Thread(target=_relay, args=(proc.stderr, sys.stderr), name="spark-submit-stderr", daemon=True)
    errors.start()
    documents = []
    for line in proc.stdout:
        if line.startswith(RESULT_PREFIX):
            documents.append(line)
        else:
            _relay([line], sys.stdout)
    code = proc.wait()
    errors.join(timeout=30)  # a worker the job left behind may hold the pipe; never wait on it for ever
    document = parse_result(documents)
    return code, document.results if document else []
