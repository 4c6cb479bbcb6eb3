"""The Python a local Spark application starts its Python processes with: compiled pyspark, not Spark's zip.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on every Python worker's
``PYTHONPATH``. ``zipimport`` never caches bytecode, so each worker compiles the pyspark modules it imports
from source: about a second of CPU per process, and a job on a warm shared session still starts three such
processes one after the other (the ``foreachBatch`` worker, the streaming source's runner, and a planner
daemon for the query's new artifact set).

When the server's ``SPARK_HOME`` is the very pyspark package the workers' Python has installed (the local
server is ``spark-submit`` from the pyspark wheel beside Tailfill), the zip holds the same sources as that
package, whose bytecode pip compiled at install. So the local Spark Connect server, and a ``spark-submit`` on a
``local`` master, run their Python (driver and workers) through a small launcher
that takes those two zips off ``PYTHONPATH`` and execs the Python: the same code, imported compiled. With any
other ``SPARK_HOME`` (a Spark distribution, another wheel), it changes nothing. ``TAILFILL_PYSPARK_ZIP=1``
keeps Spark's zips (the old behaviour, for comparison).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

KEEP_ZIP_ENV = "TAILFILL_PYSPARK_ZIP"  # "1": workers import pyspark from Spark's zip, as Spark sets it


@dataclass(frozen=True)
class Installed:
    """Where the workers' Python has pyspark (the package folder, resolved) and which py4j it has."""

    pyspark_dir: str
    py4j_version: str | None


@functools.cache  # once per process: every spark-submit of a local master asks
def installed(python: str, timeout: float = 60.0) -> Installed | None:
    """What ``python`` has installed (found, not imported: a few tens of milliseconds), or None when it has no
    pyspark or cannot say."""
    probe = ("import importlib.util as u, importlib.metadata as m, os\n"
             "s = u.find_spec('pyspark')\n"
             "print(os.path.realpath(os.path.dirname(s.origin)) if s and s.origin else '')\n"
             "try:\n    print(m.version('py4j'))\nexcept Exception:\n    print('')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=timeout, env=env,
                             check=True).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    if len(out) < 2 or not out[0]:
        return None
    return Installed(out[0], out[1] or None)


def dropped_entries(found: Installed) -> tuple[str, ...]:
    """The ``PYTHONPATH`` entries a worker started under ``SPARK_HOME=found.pyspark_dir`` does without, relative
    to that ``SPARK_HOME``: pyspark's zip, and py4j's when the installed py4j is the zip's version."""
    entries = ["python/lib/pyspark.zip"]
    if found.py4j_version:
        entries.append(f"python/lib/py4j-{found.py4j_version}-src.zip")
    return tuple(entries)


def filtered_path(python_path: str, spark_home: str, resolved_home: str, found: Installed) -> str:
    """``python_path`` without :func:`dropped_entries` when ``spark_home`` (resolved: ``resolved_home``) is the
    installed pyspark's folder; else unchanged. What the launcher does, in Python (the launcher is shell)."""
    if resolved_home != found.pyspark_dir:
        return python_path
    drop = {f"{spark_home}/{entry}" for entry in dropped_entries(found)}
    return ":".join(p for p in python_path.split(":") if p and p not in drop)


def launcher_script(python: str, found: Installed) -> str:
    """A POSIX shell script that starts ``python`` with :func:`filtered_path` applied to ``PYTHONPATH``."""
    q = shlex.quote
    drops = " ".join(q(e) for e in dropped_entries(found))
    return f"""#!/bin/sh
# Written by Tailfill for its local Spark Connect server (tailfill/run/worker_python.py): Spark's Python
# workers import pyspark compiled from the installed package, not from source in Spark's zip of the same files.
set -f
home=$(cd -P -- "${{SPARK_HOME:-/nonexistent}}" 2>/dev/null && pwd)
if [ "$home" = {q(found.pyspark_dir)} ]; then
  kept=
  IFS=:
  for entry in $PYTHONPATH; do
    drop=
    IFS=' '
    for rel in {drops}; do
      [ "$entry" = "$SPARK_HOME/$rel" ] && drop=1
    done
    IFS=:
    [ -n "$entry" ] && [ -z "$drop" ] && kept="${{kept:+$kept:}}$entry"
  done
  unset IFS
  if [ -n "$kept" ]; then PYTHONPATH=$kept; export PYTHONPATH; else unset PYTHONPATH; fi
fi
exec {q(python)} "$@"
"""


def worker_python(path: Path, python: str, env: Mapping[str, str]) -> str:
    """The Python a local Spark application runs its Python processes with: a launcher of ``python`` written to
    ``path`` when ``python`` has pyspark installed, else ``python`` itself; ``python`` when ``env`` sets
    :data:`KEEP_ZIP_ENV`. A launcher already there with the same text is kept."""
    if env.get(KEEP_ZIP_ENV, "") not in ("", "0"):
        return python
    found = installed(python)
    if found is None:
        return python
    script = launcher_script(python, found)
    with contextlib.suppress(OSError):
        if path.read_text() == script and os.access(path, os.X_OK):
            return str(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(script)
    tmp.chmod(0o755)
    os.replace(tmp, path)
    return str(path)
