"""A class-data-sharing archive of the Spark driver's classes: later JVMs start Spark in about half the CPU.

A Spark driver loads and verifies some ten thousand classes before it runs anything: a trivial job took 13 s of
CPU on this project's machine, 7 s when the JVM maps them from an archive (Java's AppCDS,
``-XX:SharedArchiveFile``). The archive is made by the first ``spark-submit`` that finds none: its JVM writes
the classes it loaded at exit (``-XX:ArchiveClassesAtExit``) to a name of its own, which :meth:`Dump.settle`
moves into place once that JVM ended by itself (a killed one leaves nothing behind); concurrent first runs
race harmlessly, the first to finish wins. Every driver (``spark-submit``, the local Spark Connect server, an
in-process session) maps the archive once it exists.

One archive per Java and Spark install and JVM options (its name is a digest of them), kept outside any home
(:attr:`~tailfill.settings.Settings.class_archive_dir`, ``TAILFILL_CLASS_ARCHIVE_DIR=off`` for none): it
holds only Java classes, the same for every pipeline. An archive the JVM cannot use (another Java, a changed
class path) is ignored by it, and its CDS messages are switched off either way.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tailfill.settings import settings

STALE_S = 3600  # a scratch archive this old belongs to no running JVM
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a mismatch or a class it cannot archive is not the job's news


def java_binary() -> Path | None:
    """The ``java`` that ``spark-submit`` runs (``$JAVA_HOME/bin/java``, else the one on ``PATH``), resolved."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def spark_jars() -> Path | None:
    """The jars of the Spark that ``spark-submit`` runs: ``$SPARK_HOME/jars``, else the pyspark package's."""
    home = os.environ.get("SPARK_HOME")
    if not home:
        spec = importlib.util.find_spec("pyspark")
        home = next(iter(spec.submodule_search_locations or ()), None) if spec else None
    return Path(home) / "jars" if home and (Path(home) / "jars").is_dir() else None


def archive_path(jvm_options: str) -> Path | None:
    """Where the archive for this Java, these Spark jars and ``jvm_options`` is kept; None when switched off or
    when Java or Spark cannot be found."""
    folder, java, jars = settings().class_archive_dir, java_binary(), spark_jars()
    if folder is None or java is None or jars is None:
        return None
    digest = hashlib.sha256(jvm_options.encode())
    for path in (java, *sorted(jars.glob("*.jar"))):
        st = path.stat()
        digest.update(f"{path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return folder / f"spark-{digest.hexdigest()[:16]}.jsa"


def use_options(jvm_options: str) -> str:
    """JVM options that map the archive when it exists (empty otherwise)."""
    path = archive_path(jvm_options)
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path is not None and path.is_file() else ""


@dataclass(frozen=True)
class Dump:
    """An archive a driver JVM is asked to write at exit, to ``scratch``, for :meth:`settle` to put at ``path``."""

    path: Path
    scratch: Path

    @property
    def options(self) -> str:
        return f"-XX:ArchiveClassesAtExit={self.scratch} {QUIET}"

    def settle(self, exit_code: int) -> None:
        """After the JVM ended: its archive goes into place if it ended by itself and none is there yet;
        otherwise (killed, or another run was first) it is removed."""
        with contextlib.suppress(OSError):
            if exit_code >= 0 and self.scratch.is_file() and not self.path.exists():
                os.replace(self.scratch, self.path)
            self.scratch.unlink(missing_ok=True)


def dump_for(jvm_options: str) -> Dump | None:
    """A :class:`Dump` when there is no archive yet (and archives are on), else None. Scratch archives older than
    :data:`STALE_S` are removed first (a caller that died before settling its own)."""
    path = archive_path(jvm_options)
    if path is None or path.exists():
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.glob("*.jsa.*.tmp"):
        with contextlib.suppress(OSError):
            if time.time() - old.stat().st_mtime > STALE_S:
                old.unlink()
    return Dump(path, path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp"))
