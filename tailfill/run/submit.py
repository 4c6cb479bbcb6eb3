"""The ingest job through ``spark-submit``: its command line and its environment. No pyspark here.

The job's arguments are its :class:`~tailfill.run.contract.JobSpec` (``spec.argv()``); what it prints
is read back by :func:`~tailfill.run.contract.read_event`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from tailfill.errors import ConfigError
from tailfill.run import runtime
from tailfill.run.class_archive import Dump
from tailfill.run.contract import JobSpec, together_argv
from tailfill.run.worker_python import worker_python
from tailfill.settings import settings


def parse_conf(pairs: list[str] | None) -> dict[str, str]:
    """``KEY=VALUE`` Spark settings, as ``spark-submit --conf`` takes them; a malformed one is an error."""
    conf: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or key != key.strip():
            raise ConfigError(f"--conf {pair!r}: expected KEY=VALUE (fix: e.g. --conf spark.executor.memory=2g)")
        conf[key] = value
    return conf


def spark_submit_command(spec: JobSpec | Sequence[JobSpec], master: str | None = None,
                         conf: dict[str, str] | None = None, dump: Dump | None = None) -> list[str]:
    """The full ``spark-submit`` command for ``spec`` (several: run together by the one application), shipping the
    tailfill code to the executors.

    ``master`` defaults to :func:`runtime.master`; ``conf`` is laid over Tailfill's Spark settings
    (:func:`runtime.spark_conf`). Builds the ``--py-files`` archive (:func:`runtime.code_archive`),
    so executors need only tailfill's dependencies, never tailfill itself. ``dump``: the driver writes the class
    archive at exit (:mod:`tailfill.run.class_archive`; the caller settles it).
    """
    master = master or runtime.master()
    cmd = [runtime.spark_submit(), "--master", master,
           *runtime.conf_args(runtime.spark_conf(dump) | local_python_conf(master) | (conf or {})),
           "--py-files", str(runtime.code_archive())]
    return [*cmd, str(runtime.job_file()), *(spec.argv() if isinstance(spec, JobSpec) else together_argv(spec))]


def local_python_conf(master: str) -> dict[str, str]:
    """On a ``local`` master, the driver and its Python workers run through the launcher that has them import
    pyspark compiled instead of from Spark's zip (:mod:`tailfill.run.worker_python`: seconds per application);
    on a cluster's master nothing, since its executors have a Python of their own."""
    if not master.startswith("local"):
        return {}
    python = worker_python(settings().home / "spark" / "python", runtime.driver_python(), os.environ)
    return {"spark.pyspark.python": python, "spark.pyspark.driver.python": python}


def submit_env() -> dict[str, str]:
    """This process's environment with Tailfill's Spark environment and shipped code on top."""
    return {**os.environ, **runtime.spark_env(), **runtime.shipped_code_env()}
