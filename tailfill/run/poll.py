"""The poll loop: what the driver does while one streaming query runs, once a second, until it ends.

It stops the query when asked — at once when its caller cancels (a killed task, a Spark Connect job's
client gone: what it committed stays, the rest is replayed later), between batches after
``stop_after_seconds``, on ``tailfill stop-tail`` or when the job's caller asks (:mod:`tailfill.run.job_stop`:
SIGINT or SIGTERM to the command that runs it) — beats the pacer's heartbeat, and prints a
progress line after every batch, every :data:`HEARTBEAT_S` seconds, and while a batch runs, every
:data:`READING_EVERY_S` seconds in which its tasks read more. It returns when the query
ends; a query that failed raises its failure (``awaitTermination``) for the restart loop — except a failure
met while it was being stopped (the batch it interrupted is replayed by the next run). A tail's query that
ends although nobody stopped it raises :class:`~tailfill.errors.QueryEnded`; one that commits nothing for its
``stall_timeout_seconds`` while busy is stopped and raises :class:`~tailfill.errors.QueryStalled`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tailfill.errors import JobCancelled, QueryEnded, QueryStalled
from tailfill.offsets import ranges_between, total
from tailfill.run.job_stop import StopAsked
from tailfill.run.pacing import Pacer
from tailfill.run.plan import IngestRequest
from tailfill.run.query_state import QueryState, Tally
from tailfill.source.handoff import hold, release
from tailfill.source.read_counts import InBatch
from tailfill.state.records import format_stages
from tailfill.state.store import StateStore, clear_stop, stop_requested

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

HEARTBEAT_S = 15.0
READING_EVERY_S = 3.0  # the most often a line says what the batch in flight has read so far
STOP_BETWEEN_BATCHES_S = 120.0  # the longest wait for a batch in flight before a stop


@dataclass(frozen=True)
class Watch:
    """What the poll loop watches a query with: its request, shared state, pacer, the pipeline's run state (stop
    requests), its caller's cancel flag, and where its lines go."""

    req: IngestRequest
    state: QueryState
    pacer: Pacer
    store: StateStore
    cancel: threading.Event | None
    log: Callable[[str], None]
    sync: Callable[[], None] | None = None  # brings ``state`` up to date when the batches run elsewhere (Connect)
    tell_stop: Callable[[], None] | None = None  # tells where the batches run that the query is being stopped
    stop: StopAsked | None = None  # the job's caller asks it to stop between batches
    budget_file: Path | None = None  # the budget its source plans batches by (held once the query is stopping)

    def stopping(self) -> None:
        """The query is about to be stopped: its source plans no more batches, and its pacer (here, or on a Connect
        server) waits no longer."""
        self.state.stopping.set()
        if self.budget_file is not None:
            hold(self.budget_file)
        if self.tell_stop is not None:
            with contextlib.suppress(Exception):  # a server that went away: stopping the query says so, not this
                self.tell_stop()

    def going_on(self) -> None:
        """The query was stopped as a failure, not for good (a stall): the next attempt plans batches again."""
        self.state.stopping.clear()
        if self.budget_file is not None:
            release(self.budget_file)


def poll(query: StreamingQuery, watch: Watch) -> None:
    """Watch ``query`` until it ends (see the module's description)."""
    from pyspark.errors import StreamingQueryException

    req, state = watch.req, watch.state
    try:
        _watch(query, watch)
    except StreamingQueryException as exc:
        if not state.stopping.is_set():
            raise
        cause = state.failure.error if state.failure is not None else " ".join(str(exc).split())[:300]
        watch.log(f"[{req.label}] stopped; the batch in flight did not commit, the next run replays it ({cause})")
        return
    if req.end is None and req.trigger == "processing_time" and not state.stopping.is_set():
        raise QueryEnded(f"[{req.label}] the streaming query ended although nobody stopped it and Spark reported "
                         f"no failure, after {state.tally.batches} batches (last step: {state.step})")


def _watch(query: StreamingQuery, watch: Watch) -> None:
    req, state = watch.req, watch.state
    started, printed, printed_at, beat_at = time.monotonic(), -1, 0.0, 0.0
    printed_reading: InBatch | None = None
    stall = StallWatch(req.stall_timeout_seconds, (state.tally.batches, state.last_end))
    try:
        while not query.awaitTermination(1.0):
            if watch.sync is not None:
                watch.sync()
            if watch.cancel is not None and watch.cancel.is_set():
                watch.stopping()
                query.stop()  # at once, as a killed spark-submit would: an unfinished batch is replayed later
                raise JobCancelled(f"[{req.label}] cancelled: its caller went away or asked to stop; "
                                   f"{state.tally.offsets:,} offsets committed before")
            if req.stop_after_seconds is not None and time.monotonic() - started >= req.stop_after_seconds:
                watch.stopping()
                stop_between_batches(query)
                watch.log(f"[{req.label}] stopped after {req.stop_after_seconds:.0f}s as asked")
                continue
            if watch.stop is not None and watch.stop.asked:
                watch.stopping()
                stop_between_batches(query)
                watch.log(f"[{req.label}] stopped between batches ({watch.stop.why})")
                continue
            if req.end is None and stop_requested(watch.store):
                watch.stopping()
                stop_between_batches(query)
                clear_stop(watch.store)
                watch.log(f"[{req.label}] stopped between batches as asked (tailfill stop-tail)")
                continue
            status = query.status
            stuck = stall.stuck((state.tally.batches, state.last_end),  # a batch committed (here or on Connect)
                                busy=bool(status.get("isTriggerActive") or status.get("isDataAvailable")))
            if stuck is not None and not state.stopping.is_set():
                watch.stopping()
                query.stop()
                watch.going_on()  # a stall is a failure, not a stop: the restart loop decides what follows
                raise QueryStalled(f"[{req.label}] committed nothing for {stuck:.0f}s while busy, at {state.step} "
                                   f"(Spark: {status.get('message', '?')}); stopped the query")
            if time.monotonic() - beat_at >= HEARTBEAT_S / 3:
                watch.pacer.heartbeat(caught_up=not status.get("isDataAvailable", True))
                beat_at = time.monotonic()
            tally = state.tally  # before what the batch in flight read: its handler forgets that first
            reading = state.in_batch()
            since = time.monotonic() - printed_at
            if (tally.batches != printed or since >= HEARTBEAT_S
                    or (reading != printed_reading and since >= READING_EVERY_S)):
                note = state.note if state.note is not None else watch.pacer.note()  # the server's, over Connect
                watch.log(progress_line(req, tally, started, note, reading, state.stalled()))
                printed, printed_reading, printed_at = tally.batches, reading, time.monotonic()
    except KeyboardInterrupt:
        watch.log(f"[{req.label}] stopping after the current batch")
        watch.stopping()
        query.stop()
        raise


class StallWatch:
    """When a query last showed life: a batch ended (its ``progress`` value changed), or it was idle (no data
    waiting, no batch in flight).

    ``stuck`` answers how long it has been busy without a batch ending, once that passes ``timeout_s`` (None:
    never, as for requests without a stall timeout).
    """

    def __init__(self, timeout_s: float | None, progress: object, now: Callable[[], float] = time.monotonic):
        self.timeout_s, self.now = timeout_s, now
        self.progress, self.alive_at = progress, now()

    def stuck(self, progress: object, busy: bool) -> float | None:
        """Seconds busy without progress, if more than the timeout; else None."""
        now = self.now()
        if progress != self.progress or not busy:
            self.progress, self.alive_at = progress, now
            return None
        quiet = now - self.alive_at
        return quiet if self.timeout_s is not None and quiet > self.timeout_s else None


def stop_between_batches(query: StreamingQuery) -> None:
    """Stop ``query`` when no micro-batch is in flight (a stopped batch would only be replayed), or after
    :data:`STOP_BETWEEN_BATCHES_S` (read at each call) in the middle of one."""
    deadline = time.monotonic() + STOP_BETWEEN_BATCHES_S
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()


def progress_line(req: IngestRequest, done: Tally, started: float, note: str = "",
                  reading: InBatch | None = None, stalled: str | None = None) -> str:
    """``[label] done/planned offsets (pct) rows/s batches ETA | last batch's stages | pacer's note``.

    After a failure, until a batch commits again (``stalled``: the failure's cause), the rate and the ETA give way
    to ``stalled: <cause>``: nothing is moving, and a rate of earlier attempts would say otherwise.

    While a batch runs and its tasks have read records (``reading``), the committed offsets are said to be
    so, and the records read follow apart: ``0/100,000 offsets (0%) committed, 41,200 read in batch 0;``
    (never more than the plan leaves). A processing-time tail has no planned total (the topic grows while it
    runs: its backlog is in the note); an available-now tail's total is the end it read to, which it may pass
    by a little.
    """
    offsets, rows = done.offsets, done.rows + done.quarantined
    end = req.end or (req.target_end if req.trigger == "available_now" else None)
    planned = max(total(ranges_between(req.start, end)), offsets) if end else 0
    elapsed = max(time.monotonic() - started, 1e-6)
    pct = f" ({100 * offsets / planned:.0f}%)" if planned else ""
    eta = f" ETA {max(planned - offsets, 0) / (offsets / elapsed):.0f}s" if planned and offsets else ""
    done_of = f"{offsets:,}/{planned:,}" if planned else f"{offsets:,}"
    speed = f"{done.batches} batches, stalled: {stalled}" if stalled else \
        f"{rows / elapsed:,.0f} rows/s {done.batches} batches{eta}"
    line = f"[{req.label}] {done_of} offsets{pct}{_in_flight(reading, planned - offsets if planned else None)} {speed}"
    if done.last is not None and done.last.stages:
        line += " | last batch: " + format_stages(done.last.stages)
    return line + (f" | {note}" if note else "")


def _in_flight(reading: InBatch | None, left: int | None) -> str:
    """`` committed, N read in batch B;`` for a batch in flight that has read records (at most ``left``)."""
    if reading is None or reading.read <= 0:
        return ""
    read = reading.read if left is None else min(reading.read, max(left, 0))
    return f" committed, {read:,} read in batch {reading.batch_id};"
