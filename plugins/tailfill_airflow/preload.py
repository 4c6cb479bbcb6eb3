"""Run an Airflow command with Tailfill's task modules imported first: the local Airflow's scheduler.

    python -m tailfill_airflow.preload scheduler --skip-serve-logs

With the LocalExecutor, the scheduler forks its worker processes, and each worker forks a process per
task (``os.fork`` without ``exec`` on Linux). What the scheduler imported before it started is in every
task process already: the DAG factory, the Spark Connect client, pyiceberg, Great Expectations. Without
this a task imports them itself, seconds of every ``preflight``, ``tail`` and ``validate``.

Only modules are imported here: no connection, session, thread or file is opened before the fork. A
module that fails to import is named in one line and left to the task that needs it (which then fails with
its own error, in its own log). A logger a module switched off when imported (pyspark's Spark Connect
client logger is off unless ``SPARK_CONNECT_LOG_LEVEL`` is set) stays silent: Airflow's logging setup,
which runs after this, switches every existing logger back on.
"""

from __future__ import annotations

import importlib
import logging
import sys
import time

# What the tasks of Tailfill's DAGs import (most of it lazily, inside the task): the heaviest first.
TASK_MODULES = (
    "great_expectations",
    "tailfill_airflow.dag_factory",
    "tailfill.run.preflight",
    "tailfill.run.spark_job",
    "tailfill.run.connect_server",
    "tailfill.run.runners",
    "pyspark.sql.connect.session",
    "tailfill.proof.validate",
    "pyiceberg.catalog.sql",
    "pyiceberg.catalog.rest",
)


def preload(modules: tuple[str, ...] = TASK_MODULES) -> list[str]:
    """Import ``modules``; returns one line per module that could not be imported (the rest are loaded)."""
    from tailfill.proof.expectations import quiet_great_expectations

    quiet_great_expectations()
    problems = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the task that needs it fails on it, with its own error and log
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
    keep_switched_off_loggers_silent()
    return problems


def keep_switched_off_loggers_silent() -> None:
    """Give every logger that is switched off (``disabled``) a level above CRITICAL, so that it stays silent when a
    logging setup later switches existing loggers back on (``dictConfig`` with ``disable_existing_loggers`` false,
    as Airflow's) — as it would have been, had its module been imported after that setup."""
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger) and logger.disabled:
            logger.setLevel(logging.CRITICAL + 1)


def main(argv: list[str]) -> None:
    """Preload the task modules, then run ``airflow <argv>`` in this process."""
    from airflow import configuration  # noqa: F401  (Airflow's own first import, as its CLI does)

    started = time.monotonic()
    for problem in preload():
        print(f"tailfill preload: not imported before the fork, {problem}", file=sys.stderr, flush=True)
    print(f"tailfill preload: task modules imported in {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    from airflow.__main__ import main as airflow_main

    sys.argv = ["airflow", *argv]
    airflow_main()


if __name__ == "__main__":
    main(sys.argv[1:])
