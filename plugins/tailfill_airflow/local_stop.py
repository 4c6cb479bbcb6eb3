"""Stop the local Airflow from another shell: ``make airflow-stop`` (``python -m tailfill_airflow.local --stop``).

The launcher (:mod:`tailfill_airflow.local`) writes its pid to ``$AIRFLOW_HOME/launcher.pid`` while it runs.
:func:`stop_launcher` sends it SIGTERM, which it turns into the same stop as Ctrl-C in its terminal: every
component's process group, this home's Spark Connect server, the embedded broker and the local Postgres it
started; then it waits until the launcher has exited.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

PID_FILE = "launcher.pid"
LAUNCHER = b"tailfill_airflow.local"  # in the launcher's command line: a reused pid is never signalled


@contextlib.contextmanager
def launcher_pid(home: Path) -> Iterator[None]:
    """Record this process as the launcher of ``home`` while the block runs."""
    path = home / PID_FILE
    path.write_text(str(os.getpid()))
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _running_launcher(home: Path) -> int | None:
    """The pid of the launcher of ``home`` when one runs."""
    try:
        pid = int((home / PID_FILE).read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if LAUNCHER in cmdline else None


def stop_launcher(home: Path, timeout: float = 120) -> str:
    """Stop the local Airflow of ``home`` and wait until its launcher has stopped everything it started; returns
    what happened, in one line. Raises ``TimeoutError`` when the launcher is still there after ``timeout`` s."""
    pid = _running_launcher(home)
    if pid is None:
        return f"no local Airflow runs for AIRFLOW_HOME={home}"
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _running_launcher(home) == pid:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Airflow launcher (pid {pid}) is still stopping after {timeout:g}s")
        time.sleep(0.5)
    return f"Airflow stopped (launcher pid {pid}, AIRFLOW_HOME={home}): its components, Spark Connect server, " \
           "embedded broker and Postgres with it"
