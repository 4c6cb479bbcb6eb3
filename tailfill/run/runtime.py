"""The one definition of how Spark runs for Tailfill: its settings, its environment, its files.

Used by the in-process session, by ``spark-submit`` (CLI and Airflow alike) and by the local
Airflow launcher, so that none of them can drift from the others. Spark binds to loopback unless
``TAILFILL_SPARK_DRIVER_HOST`` names a host that a cluster's executors can reach.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import io
import os
import sys
import zipfile
from collections.abc import Mapping
from importlib import resources
from importlib._bootstrap_external import _code_to_hash_pyc  # the same bytes compileall writes
from pathlib import Path

import tailfill
from tailfill.lake.spark_catalog import ICEBERG_EXTENSIONS
from tailfill.plumbing import jvm_jars
from tailfill.plumbing.durable import write_whole
from tailfill.run import class_archive
from tailfill.settings import LOOPBACK, settings

JOBS_PACKAGE = "tailfill.spark_jobs"  # the repo's spark_jobs/ folder, installed as package data
# Packages whose folders sit outside tailfill/ in a checkout (pyproject.toml maps them in).
MAPPED_PACKAGES = (JOBS_PACKAGE, "tailfill.proof.suites")
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
    return settings().spark_master


def conf_args(conf: Mapping[str, str]) -> list[str]:
    """``conf`` as ``spark-submit`` options: ``--conf KEY=VALUE`` for each setting."""
    return [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]


def spark_conf(dump: class_archive.Dump | None = None) -> dict[str, str]:
    """Spark settings for every Tailfill driver: loopback-bound, UTC, quiet, Python workers reused, Iceberg's Spark
    runtime on its class path (:func:`iceberg_conf`), its JVM's classes mapped from the class archive
    (:mod:`tailfill.run.class_archive`), or written to it with ``dump``.

    The driver's Python is pinned to this interpreter (which has tailfill installed), so that a
    ``spark.pyspark.python`` given for a cluster's executors never moves the driver onto theirs.
    """
    java = " ".join(filter(None, (f"-Dlog4j.configurationFile={log4j_file()}", JVM_OPTIONS,
                                  dump.options if dump else class_archive.use_options(JVM_OPTIONS))))
    host = settings().spark_driver_host
    return {
        "spark.pyspark.driver.python": driver_python(),
        "spark.driver.host": host,
        "spark.driver.bindAddress": LOOPBACK if host == LOOPBACK else "0.0.0.0",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        "spark.python.worker.reuse": "true",
        "spark.scheduler.mode": "FAIR",  # a routed pipeline's tables take turns for the cores (spark_prepare.in_pool)
        "spark.driver.extraJavaOptions": java,
        **iceberg_conf(),
    }


def iceberg_conf() -> dict[str, str]:
    """Apache Iceberg's Spark runtime (and its S3 and JDBC jars) on the driver's and executors' class path, with its
    SQL extensions (``CALL``), from the pinned ``iceberg`` set the install fetched; nothing when it is not there (a
    session that needs it says so: :func:`tailfill.run.spark_session.use_catalog`). A cluster's executors need the
    same jars at the same path."""
    if not jvm_jars.installed("iceberg"):
        return {}
    path = jvm_jars.classpath("iceberg")
    return {"spark.driver.extraClassPath": path, "spark.executor.extraClassPath": path,
            "spark.sql.extensions": ICEBERG_EXTENSIONS}


def driver_python() -> str:
    """The Python of Tailfill's Spark drivers: ``PYSPARK_PYTHON``, else this interpreter."""
    return os.environ.get("PYSPARK_PYTHON", sys.executable)


def spark_env() -> dict[str, str]:
    """Environment for Spark processes: loopback only, workers on this interpreter, no cloud metadata."""
    python = driver_python()
    return {
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", LOOPBACK),
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        "AWS_EC2_METADATA_DISABLED": "true",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def log_dir(pipeline: str, run_id: str) -> Path:
    """Where a run's local logs go (each try's spark-submit output): ``$TAILFILL_HOME/logs/<pipeline>/<run>``.

    Logs only: what other processes read about a run is shared state (:mod:`tailfill.state.store`).
    """
    return settings().home / "logs" / pipeline / run_id


def code_archive_path() -> Path:
    """Where :func:`code_archive` puts the archive: ``$TAILFILL_HOME/dist/tailfill-<version>.zip``."""
    return settings().home / "dist" / f"tailfill-{tailfill.__version__}.zip"


def code_modules() -> dict[str, Path]:
    """Every module of the ``tailfill`` package this process runs, by its path inside the package.

    Read from the import system, not from one folder: an installed wheel holds ``tailfill.spark_jobs``
    and ``tailfill.proof.suites`` inside ``tailfill/``, a checkout maps them from the repository's
    ``spark_jobs/`` and ``expectations/``; both give the same modules.
    """
    modules: dict[str, Path] = {}
    for package in ("tailfill", *MAPPED_PACKAGES):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"package {package} is not installed with tailfill: reinstall tailfill")
        for folder in map(Path, spec.submodule_search_locations):
            prefix = package.replace(".", "/")
            for path in sorted(folder.rglob("*.py")):
                modules.setdefault(f"{prefix}/{path.relative_to(folder).as_posix()}", path)
    if not modules:
        raise RuntimeError(f"no module of tailfill found at {tailfill.__file__}: reinstall tailfill")
    return dict(sorted(modules.items()))


def running_archive() -> Path | None:
    """The code archive this process imports tailfill from (a ``spark-submit`` driver's, or anything started with
    the archive on its ``PYTHONPATH``), or None for an installed or checked-out package."""
    here = Path(tailfill.__file__)
    return next((p for p in here.parents if p.suffix == ".zip" and p.is_file()), None)


def code_fingerprint() -> str:
    """A digest of the tailfill code this process runs (each module's path, size and mtime); of code imported
    from an archive, the fingerprint that archive was built with (its comment), read once."""
    archive = running_archive()
    if archive is not None:
        return _archive_fingerprint(archive)
    h = hashlib.sha256(sys.version.encode())
    for name, path in code_modules().items():
        st = path.stat()
        h.update(f"{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def code_archive(dest: Path | None = None, fingerprint: str | None = None) -> Path:
    """A zip of the ``tailfill`` package this process runs (:func:`code_modules`), shipped with ``--py-files``.

    The only builder of that archive (CLI and Airflow alike). Built from the code this process runs
    and swapped in atomically, so parallel submits never see a half-written zip; an archive already
    built from the same code (its fingerprint is the zip's comment) is kept. Each module goes in with
    its bytecode beside it (an unchecked hash-based ``.pyc``, which ``zipimport`` loads instead of
    compiling the source in every Python process Spark starts; another Python version takes the source).
    ``fingerprint``: :func:`code_fingerprint`, when the caller has it already.
    """
    dest = dest or code_archive_path()
    comment = (fingerprint or code_fingerprint()).encode()
    with contextlib.suppress(OSError, zipfile.BadZipFile), zipfile.ZipFile(dest) as existing:
        if existing.comment == comment:
            return dest
    running = running_archive()
    if running is not None:  # this process has no package folder to build from: it runs this archive's code
        if running.resolve() != dest.resolve():
            write_whole(dest, running.read_bytes())
        return dest
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.comment = comment
        for name, path in code_modules().items():
            source = path.read_bytes()
            zf.writestr(_entry(name), source)
            code = compile(source, f"{dest}/{name}", "exec", dont_inherit=True)
            zf.writestr(_entry(name + "c"), _code_to_hash_pyc(code, importlib.util.source_hash(source), checked=False))
    write_whole(dest, buffer.getvalue())
    return dest


def _entry(name: str) -> zipfile.ZipInfo:
    """An archive entry dated at zip's epoch, not when it was written: the same code makes the same bytes, which a
    Spark Connect session shared by several jobs takes again (another archive under the same name it refuses)."""
    entry = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    entry.compress_type = zipfile.ZIP_DEFLATED
    return entry


@functools.cache
def _archive_fingerprint(archive: Path) -> str:
    with zipfile.ZipFile(archive) as zf:
        return zf.comment.decode()


def shipped_code_env() -> dict[str, str]:
    """``PYTHONPATH`` for the ``spark-submit`` process: the code archive first.

    Spark plans a Python data source (offsets, partitions) in Python processes that the driver JVM
    starts with the executors' interpreter (``spark.pyspark.python``), and those see the JVM's
    ``PYTHONPATH``, not ``--py-files``: without this they could not import tailfill on a cluster
    whose executor Python has only the dependencies.
    """
    existing = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(code_archive_path()), existing) if p)}
