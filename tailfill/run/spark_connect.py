"""A Spark Connect session for one job: Tailfill's code shipped to it as an artifact, ``tailfill_kafka`` registered.

The code archive (:func:`tailfill.run.runtime.code_archive`) is added under a name that carries its
fingerprint (a session's artifacts cannot be replaced), and the data source is registered through
:mod:`tailfill.run.spark_connect_code`, so the server's Python needs tailfill's dependencies only. A job's
operations are tagged with its run id; its session is its own, or one that the jobs of a home share on its
local server (:func:`tailfill.run.connect_server.shared_session`).
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from tailfill.errors import ConnectServerError
from tailfill.run import runtime
from tailfill.run.spark_connect_code import Code, ShippedForeachBatch, register_by_value, shipped_data_source
from tailfill.settings import settings

PRELOAD_ENV = "TAILFILL_CONNECT_PRELOAD"  # "0": the foreachBatch worker loads tailfill's function on the first batch
RETRIES = 3  # a server that went away fails the job within seconds, not after pyspark's ten minutes
_CODE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session → the code shipped to it


def is_connect(spark: object) -> bool:
    """Whether ``spark`` is a Spark Connect session (a client), not a classic driver's."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def session_cores(spark: SparkSession) -> int:
    """How many tasks run at once: the driver's default parallelism, or over Connect the server's
    ``spark.default.parallelism`` (set on Tailfill's local server; else 2)."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    value = spark.conf.get("spark.default.parallelism", None)
    return int(value) if value and value.isdigit() else 2


def run_tag(run_id: str) -> str:
    """The operation tag of a run's jobs."""
    return f"tailfill-run-{run_id}"


def shipped_archive() -> Path:
    """The code archive under a name that carries its fingerprint (``tailfill-<fingerprint>.zip``)."""
    fingerprint = runtime.code_fingerprint()
    return runtime.code_archive(settings().home / "dist" / f"tailfill-{fingerprint}.zip", fingerprint)


SharedSession = Callable[[str | None], str]  # the id of a session to share, given the id the server closed (if any)


def connect_session(url: str, run_id: str | None = None, shared: SharedSession | None = None) -> SparkSession:
    """A session on the Connect server at ``url`` with Tailfill's code and data source: a new one, or with
    ``shared`` the one it names (taken again by every job that shares it, never released by one); one line
    (:class:`ConnectServerError`) when the server cannot be reached."""
    closed = None
    while True:
        session = shared(closed) if shared is not None else None
        try:
            spark = _session(url, session)
            break
        except Exception as exc:
            if session is not None and closed is None and "SESSION_CLOSED" in str(exc):
                closed = session  # it ended while idle: share a new one
                continue
            raise ConnectServerError(f"the Spark Connect server at {redact_url(url)} did not take a session: "
                                     f"{first_line(exc)}") from None
    if run_id:
        spark.addTag(run_tag(run_id))
    return spark


def _session(url: str, session: str | None) -> SparkSession:
    """The session ``session`` (None: a new one) with the code shipped and the data source registered."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    spark = SparkSession.builder.remote(f"{url}/;session_id={session}" if session else url).create()
    if session is not None:
        spark.release_session_on_close = False  # the next job takes it again, Python workers and all
    try:
        spark.client.set_retry_policies([DefaultPolicy(max_retries=RETRIES, backoff_multiplier=2.0,
                                                       initial_backoff=200, max_backoff=2000)])
        archive = shipped_archive()
        try:
            spark.addArtifacts(str(archive), pyfile=True)  # a shared session has it: the same bytes are taken
        except Exception as exc:
            if session is None or not _added_meanwhile(exc, archive.name):
                raise
        register_by_value()
        code = Code(archive)
        spark.dataSource.register(shipped_data_source(code))
    except BaseException:
        with contextlib.suppress(Exception):  # the session was not taken: its client's channel goes with it
            spark.client.close()
        raise
    _CODE[spark] = code
    return spark


def _added_meanwhile(exc: BaseException, name: str) -> bool:
    """Whether adding the archive ``name`` failed because another job added it to the shared session at the same
    moment (the server moves each upload into place, and the second move finds the first's file there)."""
    text = str(exc)
    return "FileAlreadyExistsException" in text and name in text


def foreach_batch(spark: SparkSession, fn):
    """``fn`` wrapped so that the server's ``foreachBatch`` worker loads it from the session's shipped code, as soon
    as it has it (``TAILFILL_CONNECT_PRELOAD=0``: on the first batch, the old way, for comparison)."""
    return ShippedForeachBatch(_CODE[spark], fn, preload=os.environ.get(PRELOAD_ENV, "1") != "0")


def redact_url(url: str) -> str:
    """``url`` without its token (``sc://host:port/;token=…``)."""
    parts = url.split(";")
    return ";".join(p if not p.lower().startswith("token=") else "token=***" for p in parts)


def first_line(exc: BaseException) -> str:
    """An exception's class and the first line of its text (gRPC errors are many lines long)."""
    text = str(exc).strip().splitlines()
    detail = next((ln.strip() for ln in text if "details =" in ln), text[0] if text else "")
    return f"{type(exc).__name__}: {detail}"


def server_gone(exc: BaseException) -> bool:
    """Whether ``exc`` says the Connect server cannot be reached any more (not that a query failed on it)."""
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    if type(exc).__name__ == "RetriesExceeded":
        return True
    if not isinstance(exc, SparkConnectGrpcException):
        return False
    status = getattr(exc, "getGrpcStatusCode", lambda: None)()
    return status is None or str(status).endswith(("UNAVAILABLE", "CANCELLED", "UNKNOWN"))


def server_went_away(label: str, exc: BaseException, committed: int) -> ConnectServerError:
    """The one line for a job whose Connect server went away (``exc``) after it committed ``committed`` offsets."""
    return ConnectServerError(f"[{label}] the Spark Connect server went away while the job ran ({first_line(exc)}); "
                              f"{committed:,} offsets committed before")


def query_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure Spark reported over Connect while the server is still there (a Python
    worker that could not connect back while the query started, say): one for the restart policy."""
    from pyspark.errors.exceptions.connect import SparkConnectException

    return isinstance(exc, SparkConnectException) and not server_gone(exc)
