"""The live tail's health, as the tail last saw it: freshness, incoming rate, what it can take.

A running tail rewrites its :class:`~tailfill.state.records.TailHealth` (``tail/health.json`` in the
pipeline's shared state, :mod:`tailfill.state.store`) after every batch and
on a heartbeat while it waits; a backfill reads it to yield to the tail (:mod:`tailfill.run.governor`),
and ``tailfill status`` and preflight show it. When even the tail's upper bound cannot keep up
with the incoming rate, :meth:`TailHealth.keep_up_problem` is the one line that says so.
"""

from __future__ import annotations

import time
from dataclasses import replace

from tailfill.config import PipelineConfig
from tailfill.state.records import TailHealth
from tailfill.state.store import HEALTH, StateStore, read_health, write_health
from tailfill.state.tail_verdict import tail_verdict
from tailfill.values.batch_cost import CostWindow
from tailfill.values.freshness import Freshness
from tailfill.values.moments import age, utc


def mark_stopped(store: StateStore) -> None:
    """The tail stopped: nothing for a backfill to yield to; its last measurements stay for ``status``."""
    health = read_health(store)
    if health is not None:
        write_health(store, replace(health, alive_at=0.0))


def read_tail(store: StateStore) -> tuple[TailHealth | None, str | None]:
    """The tail's health, or None and why it cannot be known (none published yet, or unreadable)."""
    try:
        health = read_health(store)
    except Exception as exc:  # unreachable or unparseable state: the reason is the answer
        return None, f"cannot read the tail's state at {store.uri(HEALTH)}: {type(exc).__name__}: {exc}"
    if health is None:
        return None, f"no tail state at {store.uri(HEALTH)} (no tail has run against this state root)"
    return health, None


def describe(cfg: PipelineConfig, health: TailHealth | None, now: float | None = None,
             unknown: str | None = None) -> list[str]:
    """Lines for ``status``, preflight and the Airflow pages: the tail's freshness and its verdict
    (:func:`~tailfill.state.tail_verdict.tail_verdict`), and any keep-up problem.

    ``unknown``: why ``health`` is None (see :func:`read_tail`); a backfill's governor is then blind.
    """
    if health is None:
        lines = [f"tail freshness: no tail batch measured yet (objective p95 ≤ {cfg.tail.freshness_seconds:g}s)"]
        if unknown:
            act = ("yields (short batches on half the cores)" if cfg.backfill.when_tail_unknown == "yield"
                   else "proceeds at full speed")
            lines.append(f"tail state unknown: {unknown}; a backfill {act} "
                         f"(backfill.when_tail_unknown: {cfg.backfill.when_tail_unknown})")
        return lines
    state = "running" if health.live(now) else "not running"
    fresh = str(health.freshness) if health.freshness else "no batch yet"
    verdict = tail_verdict(health)
    backlog = f"; backlog {health.backlog:,} offsets" if health.backlog and not verdict.backlog_late else ""
    at = health.batch_at
    measured = "" if at is None else f" {age((now or time.time()) - at)} ago, at {utc(at)}"
    lines = [f"tail freshness ({state}, last batch{measured}): {fresh}; {verdict.asstr()}{backlog}"]
    problem = health.keep_up_problem()
    if problem:
        lines.append(f"WARNING: {problem}")
    return lines


class TailPace:
    """A running tail's smoothed rates (how fast the topic grows, how fast the tail ingests) and what a batch costs."""

    ALPHA = 0.5  # weight of the newest measurement

    def __init__(self, cfg: PipelineConfig, max_offsets_per_batch: int, last: TailHealth | None = None):
        """``last``: the health an earlier tail left; its last batch's freshness, and when that was, stay until this
        tail measures a batch of its own (a run with nothing to read forgets nothing)."""
        self.health = TailHealth(alive_at=time.time(), trigger_interval_seconds=cfg.tail.trigger_interval_seconds,
                                 freshness_objective_seconds=cfg.tail.freshness_seconds,
                                 max_offsets_per_batch=max_offsets_per_batch,
                                 freshness=last.freshness if last else None, batch_at=last.batch_at if last else None)
        self._last_high: tuple[float, int] | None = None
        self.costs = CostWindow()  # the recent batches, and what a batch costs by them
        self._said = False  # the keep-up line was said and still holds

    @classmethod
    def _smooth(cls, old: float | None, new: float) -> float:
        return new if old is None else cls.ALPHA * new + (1 - cls.ALPHA) * old

    def observe(self, now: float, high_total: int, position_total: int, offsets: int, seconds: float,
                freshness: Freshness | None, partitions: int = 1) -> TailHealth:
        """After a batch of ``offsets`` that took ``seconds`` (touching ``partitions`` of the table): the broker's end
        and the tail's position."""
        h = self.health
        incoming = h.incoming_per_s
        if self._last_high is not None and now > self._last_high[0]:
            incoming = self._smooth(incoming, max(high_total - self._last_high[1], 0) / (now - self._last_high[0]))
        self._last_high = (now, high_total)
        processing = self._smooth(h.processing_per_s, offsets / seconds) if seconds > 0 else h.processing_per_s
        cost = self.costs.add(offsets, seconds, partitions)
        self.health = replace(h, alive_at=now, freshness=freshness, batch_at=now, caught_up=False,
                              incoming_per_s=incoming, processing_per_s=processing,
                              backlog=max(high_total - position_total, 0),
                              fixed_seconds=cost.fixed_seconds if cost else None,
                              per_offset_seconds=cost.per_offset_seconds if cost else None,
                              per_partition_seconds=cost.per_partition_seconds if cost else 0.0,
                              partitions_spread=cost.spread.distinct if cost else 1.0)
        return self.health

    def new_problem(self) -> str | None:
        """The keep-up line (:meth:`TailHealth.keep_up_problem`) the first time it holds: None while it lasts, so
        that it is said once, and again only after the tail kept up in between."""
        problem = self.health.keep_up_problem()
        said, self._said = self._said, problem is not None
        return None if said else problem

    def heartbeat(self, caught_up: bool) -> TailHealth:
        self.health = self.health.beat(caught_up)
        return self.health
