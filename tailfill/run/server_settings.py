"""The settings that reach a job on a long-lived server, compared as digests (never sent or printed). No pyspark.

A long-lived server (the local Spark Connect server) runs every job in the
environment it was started with. A job whose settings differ (``TAILFILL_*``, ``AWS_*``, Spark's, the
pipeline's secrets by name) must not run there as if they were the same: the server's digests are
compared with the job's, and the names that differ are all anyone is told.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from tailfill.run import runtime

MODE_ENV = "TAILFILL_SPARK"  # how jobs run when the caller does not say
_SETTING_PREFIXES = ("TAILFILL_", "AWS_", "SPARK_", "PYSPARK_")
# How to run, not what the job does; and what a Spark Connect client sets in its own process.
CLIENT_ONLY = frozenset({"SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE",
                         "SPARK_CONNECT_AUTHENTICATE_TOKEN"})
_NOT_SETTINGS = frozenset({MODE_ENV, "TAILFILL_SPARK_REMOTE", "TAILFILL_CONNECT_PRELOAD", "TAILFILL_BOUNDED_RUNS",
                           "TAILFILL_CONNECT_RECYCLE_DAEMONS", "TAILFILL_CLASS_ARCHIVE_DIR"}) | CLIENT_ONLY


def digest(value: str | None) -> str | None:
    """A setting's value as it is compared (never sent or printed): a short sha256, None when unset."""
    return None if value is None else hashlib.sha256(value.encode()).hexdigest()[:16]


def job_env_digests(env: Mapping[str, str], extra: tuple[str, ...] = ()) -> dict[str, str | None]:
    """Digests of the settings in ``env`` that reach a job: Tailfill's, AWS's, Spark's, and ``extra``
    (the pipeline's secrets by name)."""
    names = {n for n in env if n.startswith(_SETTING_PREFIXES) and n not in _NOT_SETTINGS} | set(extra)
    return {n: digest(env.get(n)) for n in sorted(names)}


def differing_settings(theirs: Mapping[str, str | None], ours: Mapping[str, str | None]) -> list[str]:
    """Names of the settings whose digests differ between a job (``theirs``) and the server (``ours``).

    ``ours`` holds every setting of the server's prefixes; a name only the job names (a secret) is
    compared against its absence."""
    return sorted(n for n in set(theirs) | set(ours) if theirs.get(n) != ours.get(n))


def server_env(env: Mapping[str, str] | None, home: Path) -> dict[str, str]:
    """The environment of a long-lived server of ``home`` (and so of every job on it): the caller's (default: this
    process's), with Tailfill's Spark environment and home on top; without what a Connect client sets in its own
    process, and without ``PYTHONPATH``: the server imports the installed tailfill, never a code archive that a
    ``spark-submit`` may rebuild under it (the code reaches a cluster's executors as artifacts or ``addPyFile``)."""
    base = {k: v for k, v in (env if env is not None else os.environ).items()
            if k != "PYTHONPATH" and k not in CLIENT_ONLY}
    return {**base, **runtime.spark_env(), "TAILFILL_HOME": str(home)}
