"""Fault injection for the crash tests: pause a process at a named point so a test can kill it.

Set ``TAILFILL_FAULT_PAUSE=<point>`` and ``TAILFILL_FAULT_DIR=<dir>`` (and optionally
``TAILFILL_FAULT_SKIP=N`` to let the first N arrivals pass). On reaching the point, a process
creates ``<dir>/<point>`` and sleeps until killed. Unset (always, outside tests), a no-op.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

POINTS = ("while-writing", "before-commit")


def pause(point: str) -> None:
    """Block forever at ``point`` if a crash test asked for it."""
    if os.environ.get("TAILFILL_FAULT_PAUSE") != point:
        return
    flag_dir = Path(os.environ.get("TAILFILL_FAULT_DIR", "."))
    flag_dir.mkdir(parents=True, exist_ok=True)
    with (flag_dir / f"{point}.arrivals").open("a") as log:  # shared by all worker processes
        log.write(f"{os.getpid()}\n")
    arrivals = len((flag_dir / f"{point}.arrivals").read_text().splitlines())
    if arrivals <= int(os.environ.get("TAILFILL_FAULT_SKIP", "0")):
        return
    (flag_dir / point).touch()
    while True:
        time.sleep(1)
