"""Write the class archive (:mod:`tailfill.run.class_archive`) before any job needs it.

The archive is otherwise written by the first ``spark-submit`` that finds none, so a machine whose first jobs run
on a Spark Connect server, or a test session that starts dozens of JVMs at once, pays the full class loading in
every JVM until then. :func:`write_class_archive` runs a small local job for the archive alone (about 40 s on a
quiet 2-core machine, the archive's writing at exit included), once per Java and Spark install.
"""

from __future__ import annotations

import subprocess

from tailfill.run import class_archive, runtime
from tailfill.run.submit import submit_env

TIMEOUT_S = 300  # a warm-up that takes longer than this is killed, and leaves no archive


def warmup_command(dump: class_archive.Dump) -> list[str]:
    """The ``spark-submit`` of the warm-up job, its JVM asked to write ``dump``'s archive at exit."""
    return [runtime.spark_submit(), "--master", "local[2]", *runtime.conf_args(runtime.spark_conf(dump)),
            str(runtime.package_file(runtime.JOBS_PACKAGE, "class_warmup.py"))]


def write_class_archive() -> str:
    """Write the class archive if archives are on and none exists; one line saying what happened (a failed
    warm-up only costs the speed-up: jobs then start as without an archive)."""
    dump = class_archive.dump_for(runtime.JVM_OPTIONS)
    if dump is None:
        path = class_archive.archive_path(runtime.JVM_OPTIONS)
        return f"class archive: {path}" if path else "class archive: off"
    try:
        code = subprocess.run(warmup_command(dump), env=submit_env(), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace",
                              timeout=TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        code = -9
    dump.settle(code)
    if not dump.path.is_file():
        return f"class archive: the warm-up job ended with exit code {code}; jobs start without one"
    ended = f" (the warm-up job ended with exit code {code})" if code else ""
    return f"class archive: written to {dump.path}{ended}"


if __name__ == "__main__":
    print(write_class_archive())
