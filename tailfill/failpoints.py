"""Failpoints for the crash and failure-budget tests. Outside tests, both are no-ops.

- ``pause(point)``: with ``TAILFILL_FAULT_PAUSE=<point>`` (and ``TAILFILL_FAULT_SKIP=N`` to let the
  first N arrivals pass), or while ``$TAILFILL_FAULT_DIR/pause-<point>`` exists (armed by a file, for
  a process started earlier: the Spark Connect server), create ``$TAILFILL_FAULT_DIR/<point>`` and sleep
  until killed, or until a test creates ``$TAILFILL_FAULT_DIR/<point>.release`` (after it broke
  something meanwhile). A point passed a ``scope`` (the pipeline's name) can also be armed for that
  pipeline alone, by ``$TAILFILL_FAULT_DIR/pause-<point>@<scope>``: its arrivals, marker and release
  files are then ``<point>@<scope>…``, so each pipeline is counted and held on its own.
- ``maybe_fail(point)``: if ``$TAILFILL_FAULT_DIR/fail-<point>`` (or, for a point passed a ``scope``,
  ``fail-<point>@<scope>``) holds a count above zero, decrement it and raise :class:`InjectedFault`.
  File-based, so a test can arm it after Spark's workers have started.
"""

from __future__ import annotations

import os
import time

from tailfill.errors import InjectedFault
from tailfill.plumbing.durable import locked
from tailfill.settings import settings


def pause(point: str, scope: str | None = None) -> None:
    """Block at ``point`` if a test asked for it (for every pipeline, or for ``scope``'s alone): until killed, or
    until the test releases it."""
    env = settings()
    flag_dir = env.fault_dir
    if flag_dir is None:
        return
    if env.fault_pause == point or (flag_dir / f"pause-{point}").exists():
        name = point
    elif scope is not None and (flag_dir / f"pause-{point}@{scope}").exists():
        name = f"{point}@{scope}"
    else:
        return
    flag_dir.mkdir(parents=True, exist_ok=True)
    arrivals_file = flag_dir / f"{name}.arrivals"
    with arrivals_file.open("a") as log:  # shared by all worker processes
        log.write(f"{os.getpid()}\n")
    if len(arrivals_file.read_text().splitlines()) <= env.fault_skip:
        return
    (flag_dir / name).touch()
    while not (flag_dir / f"{name}.release").exists():
        time.sleep(0.2)


def maybe_fail(point: str, scope: str | None = None) -> None:
    """Raise :class:`InjectedFault` while the armed count for ``point`` lasts (armed for every pipeline, or by
    ``fail-<point>@<scope>`` for ``scope``'s alone)."""
    flag_dir = settings().fault_dir
    if flag_dir is None:
        return
    for armed in [flag_dir / f"fail-{point}", *([flag_dir / f"fail-{point}@{scope}"] if scope else [])]:
        if not armed.exists():
            continue
        with locked(armed, "r+") as f:
            left = int(f.read().strip() or 0)
            if left <= 0:
                continue
            f.seek(0)
            f.truncate()
            f.write(str(left - 1))
        raise InjectedFault(f"injected failure at {point} ({left - 1} more armed)")
