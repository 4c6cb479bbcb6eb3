"""Live progress of a Spark run, read from its batch reports while it runs.

The job writes one report per committed micro-batch into the pipeline's shared run state
(:mod:`tailfill.state.store`), which every machine that reaches the warehouse reads.
:func:`progress` turns them into what a user asks while waiting: offsets done of planned, rows/s,
ETA, the tail's freshness when the batch reports carry it. While nothing commits after the job restarted a
query (a broker gone, say), a run is *stalled* with that restart's cause, as the job's own progress line says,
and shows no rate or ETA. :class:`ProgressWatcher` polls them beside a running ``spark-submit`` and hands every
change to a callback (the operator logs it and updates an XCom); the plugin pages call :func:`progress` on
request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from tailfill.state.records import BatchReport
from tailfill.state.store import RunReports, StateStore
from tailfill.values.freshness import Freshness

log = logging.getLogger(__name__)


def _freshness(reports: list[BatchReport]) -> dict | None:
    """The latest batch's produce-to-commit latency (p50, p95, max seconds; records)."""
    return next((r.freshness for r in reversed(reports) if r.freshness), None)


def stalled_cause(reports: list[BatchReport], restarts: Sequence[dict], since: float) -> str | None:
    """The cause of the job's last restart of a query at or after ``since`` (this try's start) when no batch has
    committed after it, else None: the job is trying again and nothing moves. ``restarts``: the lane record's
    (``at``, ``cause``), whose cause is the one the job's progress line says it stalled on."""
    mine = [r for r in restarts if r["at"] >= since]
    if not mine:
        return None
    last = max(mine, key=lambda r: r["at"])
    return last["cause"] if not reports or reports[-1].at < last["at"] else None


@dataclass(frozen=True)
class Progress:
    """A run's progress as a user asks while waiting: done of planned, speed, ETA, the tail's freshness.

    Like dlt's ``LoadInfo``: :meth:`asdict` for machines (the ``progress`` XCom, the plugin pages),
    :meth:`asstr` for people (the task log, the lane's label in the grid).
    """

    state: str  # running, finished, failed (or "not started" on a page)
    offsets_done: int
    offsets_planned: int | None  # None: unbounded (a processing-time tail)
    percent: float | None
    rows: int  # rows + quarantined rows
    quarantined: int
    batches: int
    rows_per_s: float
    eta_s: int | None
    elapsed_s: float
    last_commit_age_s: float | None
    freshness: dict | None  # the latest batch's produce-to-commit latency (p50, p95, max; records)
    updated_at: float
    stalled: str | None = None  # the cause the job restarted on, while no batch committed since (no rate, no ETA)

    def asstr(self) -> str:
        """One line: ``[running] 12,000/50,000 offsets (24%) · 3,100 rows/s · ETA 12s · 4 batches``, or while
        stalled ``[running] 12,000/50,000 offsets (24%) · 4 batches · stalled: <cause>``."""
        planned = self.offsets_planned
        parts = [f"{self.offsets_done:,}/{planned:,} offsets ({self.percent:.0f}%)" if planned
                 else f"{self.offsets_done:,} offsets"]
        if not self.stalled:
            parts.append(f"{self.rows_per_s:,.0f} rows/s")
        if self.eta_s is not None:
            parts.append(f"ETA {self.eta_s}s")
        parts.append(f"{self.batches} batches" if self.batches else "first batch running")
        if self.stalled:
            return f"[{self.state}] " + " · ".join([*parts, f"stalled: {self.stalled}"])
        if self.freshness:
            parts.append(f"freshness {Freshness.from_dict(self.freshness)}")
        return f"[{self.state}] " + " · ".join(parts)

    def asdict(self) -> dict:
        """Every field, and the line, as JSON-able values."""
        return {**asdict(self), "line": self.asstr()}


def progress(reports: list[BatchReport], planned: int | None, started_at: float, now: float | None = None,
             state: str = "running", tail: bool = True, restarts: Sequence[dict] = ()) -> Progress:
    """Progress of a run: ``planned`` offsets (None: unbounded), its batch reports, when it started. Freshness only
    of a ``tail``: a backfill lane's records are old by design, so their produce-to-commit latency means nothing.
    A running try whose job restarted a query (``restarts``: the lane record's) and committed nothing since is
    stalled with that restart's cause: no rate, no ETA, no freshness (figures of batches before it)."""
    now = time.time() if now is None else now
    done = sum(r.offsets for r in reports)
    elapsed = max(now - started_at, 1e-6)
    mine = [r for r in reports if r.at >= started_at]  # an earlier try's batches count as done, not as speed
    offset_rate = sum(r.offsets for r in mine) / elapsed
    stalled = stalled_cause(reports, restarts, started_at) if state == "running" else None
    return Progress(
        state=state, offsets_done=done, offsets_planned=planned,
        percent=round(100 * done / planned, 1) if planned else None,
        rows=sum(r.rows + r.quarantined for r in reports), quarantined=sum(r.quarantined for r in reports),
        batches=len(reports),
        rows_per_s=0.0 if stalled else round(sum(r.rows + r.quarantined for r in mine) / elapsed, 1),
        eta_s=(round(max(planned - done, 0) / offset_rate)
               if planned and offset_rate and state == "running" and not stalled else None),
        elapsed_s=round(elapsed, 1), last_commit_age_s=round(now - reports[-1].at, 1) if reports else None,
        freshness=_freshness(reports) if tail and not stalled else None, updated_at=round(now, 3), stalled=stalled)


class ProgressWatcher:
    """Polls a run's batch reports every ``interval`` s in a thread; ``publish`` gets each change.

    The first call comes at once (nothing committed yet, the first batch running), then one per
    newly committed batch (and one per :meth:`poll` forced, as after a restart), and a last one when the watcher
    stops. ``restarts`` gives the lane's restarts so far (the lane record's), of which the progress says whether
    the run is stalled.
    """

    def __init__(self, store: StateStore, run_id: str, planned: int | None, publish: Callable[[Progress], None],
                 interval: float = 2.0, tail: bool = True, restarts: Callable[[], Sequence[dict]] = tuple):
        self.run_id, self.planned, self.tail, self.restarts = run_id, planned, tail, restarts
        self.reports = RunReports(store, run_id)  # fetches each batch report once
        self.publish, self.interval = publish, interval
        self.started_at = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"progress-{run_id}", daemon=True)
        self._seen = -1
        self._lock = threading.Lock()

    def __enter__(self) -> ProgressWatcher:
        self.poll()  # the first line at once, before the job has even started its session
        self._thread.start()
        return self

    def __exit__(self, exc_type, *_) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.poll(state="failed" if exc_type else "finished", force=True)

    def poll(self, state: str = "running", force: bool = False) -> None:
        """Publish the progress if a batch committed since the last call (or ``force``)."""
        with self._lock:
            reports = self.reports.read()
            if force or len(reports) != self._seen:
                self._seen = len(reports)
                self.publish(progress(reports, self.planned, self.started_at, state=state, tail=self.tail,
                                      restarts=self.restarts()))

    def _loop(self) -> None:
        while True:
            try:
                self.poll()
            except Exception as exc:  # progress is a view: report it, never fail the ingest for it
                log.warning("progress of %s not updated: %s: %s", self.run_id, type(exc).__name__, exc)
            if self._stop.wait(self.interval):
                return
