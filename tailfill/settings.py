"""The environment's settings: every ``TAILFILL_*`` variable Tailfill reads, in one typed object.

:func:`settings` reads them when asked (nothing is cached: a caller that changes the environment is
seen at once) and checks each, so a bad value is one line naming the variable and its fix. Nothing
else in Tailfill reads a ``TAILFILL_*`` variable; a pipeline's YAML may still reference any variable as
``${VAR}`` (:mod:`tailfill.pipeline.load`), and the variables that hold secrets are named by the
pipeline (its ``*_env`` settings).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tailfill.errors import ConfigError

LOOPBACK = "127.0.0.1"
DEFAULT_MASTER = "local[2]"
DEFAULT_SPARK_SLOTS = 4  # three backfill lanes (the form's default) beside one incremental run
SPARK_MODES = ("auto", "connect", "submit")
REMOVED_SPARK_MODES = {"warm": "the warm Spark server was removed, Spark Connect replaces it: use connect"}


@dataclass(frozen=True)
class Settings:
    """What the environment says, typed; the variable of each field is in its comment."""

    home: Path  # TAILFILL_HOME: local state (logs, caches, the embedded services' addresses); ./.tailfill
    pipelines: Path  # TAILFILL_PIPELINES: the folder of the pipelines' YAML files; ./pipelines
    spark_mode: Literal["auto", "connect", "submit"]  # TAILFILL_SPARK: how jobs run unless told; auto
    spark_remote: str | None  # TAILFILL_SPARK_REMOTE: a Spark Connect server's sc://host:port (none: the local one)
    spark_master: str  # TAILFILL_SPARK_MASTER: local[2]
    spark_driver_host: str  # TAILFILL_SPARK_DRIVER_HOST: a host a cluster's executors reach; loopback
    spark_log_level: str  # TAILFILL_SPARK_LOG_LEVEL: ERROR
    spark_slots: int  # TAILFILL_SPARK_SLOTS: slots of the Airflow pool of Spark jobs (at least 2)
    fault_dir: Path | None  # TAILFILL_FAULT_DIR: where tests arm failpoints (tailfill.failpoints)
    fault_pause: str | None  # TAILFILL_FAULT_PAUSE: the failpoint to pause at
    fault_skip: int  # TAILFILL_FAULT_SKIP: arrivals at the paused point to let pass first
    broker_port: int | None  # TAILFILL_BROKER_PORT: the embedded broker's port (None: the kept one, else a free one)
    jars_dir: Path  # TAILFILL_JARS_DIR: the cache of pinned JVM jars the install fetches (tailfill.dev.jars); ~/.cache
    registry_port: int | None  # TAILFILL_REGISTRY_PORT: the development Schema Registry's port
    postgres_bin: str | None  # TAILFILL_POSTGRES_BIN: where the Postgres server binaries are
    airflow_port: int  # TAILFILL_AIRFLOW_PORT: the local Airflow's port; 8080
    airflow_db: str | None  # TAILFILL_AIRFLOW_DB: the local Airflow's metadata database URL
    airflow_preload: bool  # TAILFILL_AIRFLOW_PRELOAD: the local scheduler imports the task modules before it forks; 1
    airflow_examples: bool  # TAILFILL_AIRFLOW_EXAMPLES=1: Airflow makes DAGs of example pipelines (example: true); 0
    on_failure: str | None  # TAILFILL_ON_FAILURE: module:function called with every recorded failure
    class_archive_dir: Path | None  # TAILFILL_CLASS_ARCHIVE_DIR: Spark's JVM class archive (off: none); ~/.cache
    bounded_as_query: bool  # TAILFILL_BOUNDED_RUNS=query: a backfill or --once tail runs a streaming query (comparison)
    stop_file: Path | None  # TAILFILL_STOP_FILE: set by a runner for its job: the file its caller writes to stop it

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings ``env`` (default: this process's environment) gives; ConfigError naming a bad one."""
        env = os.environ if env is None else env
        mode = env.get("TAILFILL_SPARK") or "auto"
        problem = spark_mode_problem(mode)
        if problem is not None:
            raise ConfigError(f"TAILFILL_SPARK={mode!r}: {problem}")
        remote = env.get("TAILFILL_SPARK_REMOTE") or None
        if remote is not None and not remote.startswith("sc://"):
            raise ConfigError(f"TAILFILL_SPARK_REMOTE={remote!r}: not a Spark Connect address (fix: sc://host:port)")
        slots = env.get("TAILFILL_SPARK_SLOTS") or str(DEFAULT_SPARK_SLOTS)
        if not slots.isdigit() or int(slots) < 2:
            raise ConfigError(f"TAILFILL_SPARK_SLOTS={slots!r}: the Spark pool needs at least 2 slots (fix: set "
                              "TAILFILL_SPARK_SLOTS to an integer >= 2, one slot per concurrent Spark job)")
        fault_dir = env.get("TAILFILL_FAULT_DIR")
        return cls(
            home=Path(env.get("TAILFILL_HOME") or ".tailfill").absolute(),
            pipelines=Path(env.get("TAILFILL_PIPELINES") or "pipelines").absolute(),
            spark_mode=mode,  # type: ignore[arg-type]
            spark_remote=remote,
            spark_master=env.get("TAILFILL_SPARK_MASTER") or DEFAULT_MASTER,
            spark_driver_host=env.get("TAILFILL_SPARK_DRIVER_HOST") or LOOPBACK,
            spark_log_level=env.get("TAILFILL_SPARK_LOG_LEVEL") or "ERROR",
            spark_slots=int(slots),
            fault_dir=Path(fault_dir) if fault_dir else None,
            fault_pause=env.get("TAILFILL_FAULT_PAUSE") or None,
            fault_skip=_number(env, "TAILFILL_FAULT_SKIP") or 0,
            broker_port=_number(env, "TAILFILL_BROKER_PORT"),
            jars_dir=_cache_dir(env, "TAILFILL_JARS_DIR", "jars"),
            registry_port=_number(env, "TAILFILL_REGISTRY_PORT"),
            postgres_bin=env.get("TAILFILL_POSTGRES_BIN") or None,
            airflow_port=_number(env, "TAILFILL_AIRFLOW_PORT") or 8080,
            airflow_db=env.get("TAILFILL_AIRFLOW_DB") or None,
            airflow_preload=(_choice(env, "TAILFILL_AIRFLOW_PRELOAD", ("0", "1")) or "1") == "1",
            airflow_examples=(_choice(env, "TAILFILL_AIRFLOW_EXAMPLES", ("0", "1")) or "0") == "1",
            on_failure=env.get("TAILFILL_ON_FAILURE") or None,
            class_archive_dir=None if env.get("TAILFILL_CLASS_ARCHIVE_DIR") == "off" else _cache_dir(
                env, "TAILFILL_CLASS_ARCHIVE_DIR", "jvm"),
            bounded_as_query=_choice(env, "TAILFILL_BOUNDED_RUNS", ("direct", "query")) == "query",
            stop_file=Path(env["TAILFILL_STOP_FILE"]) if env.get("TAILFILL_STOP_FILE") else None,
        )


def _cache_dir(env: Mapping[str, str], name: str, default: str) -> Path:
    """The folder variable ``name`` gives, else ``default`` in Tailfill's part of the user's cache."""
    if given := env.get(name):
        return Path(given).absolute()
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(cache) / "tailfill" / default


def spark_mode_problem(mode: str) -> str | None:
    """What is wrong with ``mode`` as a way to run jobs (``TAILFILL_SPARK``, ``--spark``), naming the ways there
    are, or None when it is one of them."""
    if mode in SPARK_MODES:
        return None
    removed = REMOVED_SPARK_MODES.get(mode)
    choices = ", ".join(SPARK_MODES)
    return f"{removed} (the modes: {choices})" if removed else f"use {choices}"


def _number(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if not raw:
        return None
    if not raw.isdigit():
        raise ConfigError(f"{name}={raw!r}: not a whole number (fix: set {name} to a number, or unset it)")
    return int(raw)


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str | None:
    raw = env.get(name)
    if raw and raw not in choices:
        raise ConfigError(f"{name}={raw!r}: use one of {', '.join(choices)} (or unset it)")
    return raw or None


def settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings of this process's environment now (or of ``env``)."""
    return Settings.from_env(env)
