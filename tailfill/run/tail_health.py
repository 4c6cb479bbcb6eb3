"""The live tail's health, as the tail last saw it: freshness, incoming rate, what it can take.

A running tail rewrites ``$TAILFILL_HOME/runs/<pipeline>/tail-health.json`` after every batch and
on a heartbeat while it waits; a backfill reads it to yield to the tail (:mod:`tailfill.run.governor`),
and ``tailfill status`` and preflight show it. When even the tail's upper bound cannot keep up
with the incoming rate, :meth:`TailHealth.keep_up_problem` is the one line that says so.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tailfill.config import PipelineConfig
from tailfill.durable import write_atomic
from tailfill.lake.batch_report import runs_dir
from tailfill.lake.freshness import Freshness

KEEP_UP_TOLERANCE = 1.05  # incoming may exceed capacity by this much before it is called a problem
MIN_LIVE_SECONDS = 15.0  # a heartbeat older than max(this, 3 intervals) means no tail is running


@dataclass(frozen=True)
class TailHealth:
    """What the tail measured at its last batch (and when it last said it was alive)."""

    alive_at: float  # unix seconds of the last heartbeat or batch
    trigger_interval_seconds: float
    freshness_objective_seconds: float
    max_offsets_per_batch: int
    freshness: Freshness | None = None  # of the last batch
    batch_at: float | None = None  # when the last batch committed
    caught_up: bool = False  # the source had nothing more to read at the last heartbeat
    incoming_per_s: float | None = None  # the topic's growth, offsets/s (smoothed)
    processing_per_s: float | None = None  # the tail's own rate while a batch runs, offsets/s (smoothed)
    backlog: int | None = None  # offsets on the broker not yet committed, after the last batch

    def live(self, now: float | None = None) -> bool:
        """A tail is running: its heartbeat is recent."""
        age = (now or time.time()) - self.alive_at
        return age <= max(MIN_LIVE_SECONDS, 3 * self.trigger_interval_seconds)

    @property
    def healthy(self) -> bool:
        """The tail meets its freshness objective (or has nothing left to read)."""
        if self.caught_up or self.freshness is None:
            return True
        return self.freshness.p95 <= self.freshness_objective_seconds

    @property
    def capacity_per_s(self) -> float | None:
        """The most offsets/s the tail can take: its cap per trigger, or its measured rate if lower."""
        by_cap = self.max_offsets_per_batch / self.trigger_interval_seconds
        return min(by_cap, self.processing_per_s) if self.processing_per_s else None

    def keep_up_problem(self) -> str | None:
        """One line when the incoming rate is above what the tail can take: the numbers and the fix."""
        capacity = self.capacity_per_s
        if self.incoming_per_s is None or capacity is None or self.incoming_per_s <= capacity * KEEP_UP_TOLERANCE:
            return None
        by_cap = self.max_offsets_per_batch / self.trigger_interval_seconds
        if capacity >= by_cap:
            needed = math.ceil(self.incoming_per_s * self.trigger_interval_seconds * 1.2)
            limit = (f"tail.max_offsets_per_batch {self.max_offsets_per_batch:,} per "
                     f"{self.trigger_interval_seconds:g}s trigger")
            fix = f"raise tail.max_offsets_per_batch to at least {needed:,}"
        else:
            limit = f"its measured processing rate {self.processing_per_s:,.0f} offsets/s"
            fix = "give the tail more cores or executors (--master, --conf), or a longer trigger_interval_seconds"
        return (f"the tail cannot keep up: incoming {self.incoming_per_s:,.0f} offsets/s, the most the tail "
                f"can take is {capacity:,.0f} offsets/s ({limit}); fix: {fix}")

    def to_json(self) -> str:
        data = asdict(self)
        data["freshness"] = self.freshness.to_dict() if self.freshness else None
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> TailHealth:
        data = json.loads(text)
        data["freshness"] = Freshness.from_dict(data["freshness"])
        return cls(**data)

    def beat(self, caught_up: bool, now: float | None = None) -> TailHealth:
        return replace(self, alive_at=now or time.time(), caught_up=caught_up)


def health_file(pipeline: str) -> Path:
    return runs_dir(pipeline) / "tail-health.json"


def write_health(pipeline: str, health: TailHealth) -> None:
    write_atomic(health_file(pipeline), health.to_json())  # a reader never sees half a file


def read_health(pipeline: str) -> TailHealth | None:
    path = health_file(pipeline)
    try:
        return TailHealth.from_json(path.read_text())
    except FileNotFoundError:
        return None


def mark_stopped(pipeline: str) -> None:
    """The tail stopped: nothing for a backfill to yield to; its last measurements stay for ``status``."""
    health = read_health(pipeline)
    if health is not None:
        write_health(pipeline, replace(health, alive_at=0.0))


def describe(cfg: PipelineConfig, health: TailHealth | None, now: float | None = None) -> list[str]:
    """Lines for ``status`` and preflight: the tail's freshness against its objective, and any keep-up problem."""
    if health is None:
        return [f"tail freshness: no tail batch measured yet (objective p95 ≤ {cfg.tail.freshness_seconds:g}s)"]
    state = "running" if health.live(now) else "not running"
    fresh = str(health.freshness) if health.freshness else "no batch yet"
    verdict = "meets" if health.healthy else "MISSES"
    backlog = f"; backlog {health.backlog:,} offsets" if health.backlog else ""
    lines = [f"tail freshness ({state}, last batch): {fresh}; {verdict} the objective "
             f"p95 ≤ {health.freshness_objective_seconds:g}s{backlog}"]
    problem = health.keep_up_problem()
    if problem:
        lines.append(f"WARNING: {problem}")
    return lines


class TailPace:
    """A running tail's smoothed rates: how fast the topic grows, how fast the tail ingests."""

    ALPHA = 0.5  # weight of the newest measurement

    def __init__(self, cfg: PipelineConfig, max_offsets_per_batch: int):
        self.health = TailHealth(alive_at=time.time(), trigger_interval_seconds=cfg.tail.trigger_interval_seconds,
                                 freshness_objective_seconds=cfg.tail.freshness_seconds,
                                 max_offsets_per_batch=max_offsets_per_batch)
        self._last_high: tuple[float, int] | None = None

    @classmethod
    def _smooth(cls, old: float | None, new: float) -> float:
        return new if old is None else cls.ALPHA * new + (1 - cls.ALPHA) * old

    def observe(self, now: float, high_total: int, position_total: int, offsets: int, seconds: float,
                freshness: Freshness | None) -> TailHealth:
        """After a batch of ``offsets`` that took ``seconds``: the broker's end and the tail's position."""
        h = self.health
        incoming = h.incoming_per_s
        if self._last_high is not None and now > self._last_high[0]:
            incoming = self._smooth(incoming, max(high_total - self._last_high[1], 0) / (now - self._last_high[0]))
        self._last_high = (now, high_total)
        processing = self._smooth(h.processing_per_s, offsets / seconds) if seconds > 0 else h.processing_per_s
        self.health = replace(h, alive_at=now, freshness=freshness, batch_at=now, caught_up=False,
                              incoming_per_s=incoming, processing_per_s=processing,
                              backlog=max(high_total - position_total, 0))
        return self.health

    def heartbeat(self, caught_up: bool) -> TailHealth:
        self.health = self.health.beat(caught_up)
        return self.health


def stop_file(pipeline: str) -> Path:
    """Written by ``tailfill stop-tail``: the running tail stops between batches and removes it."""
    return runs_dir(pipeline) / "tail-stop"


def request_stop(pipeline: str) -> None:
    path = stop_file(pipeline)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(time.time()))
