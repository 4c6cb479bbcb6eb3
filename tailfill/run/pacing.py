"""How large the next micro-batch may be, decided between batches: one interface, two pacers.

A query's writer asks its :class:`Pacer` for the first batch's :class:`~tailfill.source.handoff.Budget`
and, after each commit, for the next one. The tail paces itself to its trigger interval and
publishes its health (:class:`TailPacer`); a backfill asks its governor, which applies the rate
limit and yields to a live tail (:class:`BackfillPacer`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from tailfill.offsets import ranges_between, total
from tailfill.pipeline.handle import Pipeline
from tailfill.run.auto_upkeep import TailUpkeep
from tailfill.run.governor import Governor
from tailfill.run.plan import IngestRequest
from tailfill.run.tail_health import TailPace, mark_stopped, read_tail
from tailfill.run.tuning import lane_batch_cap, longest_batch_seconds, tail_batch_offsets
from tailfill.source.handoff import Budget
from tailfill.source.kafka import OwnedConsumer, watermarks
from tailfill.state.records import BatchReport, TailHealth
from tailfill.state.store import read_health, write_health
from tailfill.values.freshness import Freshness

ONE_TASK_OFFSETS = 100_000  # a partitioned table's tail batch up to this size is read by one task


class Pacer(Protocol):
    """Sizes a query's batches; called on the driver between batches, never during one."""

    def first_budget(self) -> Budget:
        """The first batch's budget."""
        ...

    def after_batch(self, report: BatchReport) -> tuple[Budget, float]:
        """The next batch's budget after ``report`` committed, and the seconds spent waiting first."""
        ...

    def heartbeat(self, caught_up: bool) -> None:
        """Between batches: the query is alive (and whether the source had more to read)."""
        ...

    def note(self) -> str:
        """What the progress line adds (the governor's state, the tail's freshness), or ''."""
        ...

    def warnings(self) -> list[str]:
        """Problems worth repeating in the run's summary."""
        ...

    def stopped(self) -> None:
        """The query ended (finished, failed or stopped)."""
        ...


class BackfillPacer:
    """A backfill query's batches: as the governor allows (rate limit, yielding to the tail)."""

    def __init__(self, pipeline: Pipeline, req: IngestRequest, cores: int, stopping: threading.Event,
                 log: Callable[[str], None]):
        cfg = pipeline.cfg
        ceiling = req.max_offsets_per_batch
        if req.end is not None:  # a lane's batches: several, however small its range (its progress moves in steps)
            ceiling = lane_batch_cap(total(ranges_between(req.start, req.end)), ceiling,
                                     cfg.backfill.min_batches_per_lane)
        self.governor = Governor(
            max_offsets_per_batch=ceiling, batch_seconds=req.batch_seconds,
            max_offsets_per_second=req.max_offsets_per_second, cores=cores,
            read_tail=lambda: read_tail(pipeline.state),
            when_tail_unknown=cfg.backfill.when_tail_unknown, tail_interval_seconds=cfg.tail.trigger_interval_seconds,
            log=log, stopping=stopping)

    def first_budget(self) -> Budget:
        return self.governor.first_budget()

    def after_batch(self, report: BatchReport) -> tuple[Budget, float]:
        return self.governor.after_batch(report.offsets, report.seconds, report.table_partitions or 1)

    def heartbeat(self, caught_up: bool) -> None:
        return None

    def note(self) -> str:
        return self.governor.state if self.governor.state != "full speed" else ""

    def warnings(self) -> list[str]:
        return []

    def stopped(self) -> None:
        return None


class TailPacer:
    """The tail's batches: sized to fit its trigger interval; its health published for backfills and status."""

    def __init__(self, pipeline: Pipeline, req: IngestRequest, log: Callable[[str], None]):
        self.cfg, self.req, self.log = pipeline.cfg, req, log
        self.state = pipeline.state
        self.pace = TailPace(self.cfg, req.max_offsets_per_batch, last=read_tail(self.state)[0])
        self.conf = pipeline.kafka
        self.consumer = OwnedConsumer(self.conf)  # kept between batches; closed when the tail stops
        self.position = dict(req.start.offsets)  # the end of what this tail has committed, per partition
        self.upkeep = TailUpkeep(pipeline, log)  # the tables kept up beside the batches (no maintenance block)
        write_health(self.state, self.pace.health)

    def first_budget(self) -> Budget:
        return self._budget(self.req.max_offsets_per_batch)

    def _budget(self, offsets: int) -> Budget:
        """A batch of ``offsets``: on a partitioned table, one task reads a batch of up to :data:`ONE_TASK_OFFSETS`
        (it writes one file per table partition, and no files of several tasks are merged before the commit)."""
        one = self.cfg.target.partition_by and offsets <= ONE_TASK_OFFSETS
        return Budget(offsets, 1 if one else None)

    def after_batch(self, report: BatchReport) -> tuple[Budget, float]:
        for r in [*report.committed, *report.skipped]:
            self.position[r.tp] = max(self.position.get(r.tp, 0), r.end)
        fresh = Freshness.from_dict(report.freshness)
        high = watermarks(self.conf, list(self.position), consumer=self.consumer).high
        health = self.pace.observe(time.time(), sum(high.offsets.values()), sum(self.position.values()),
                                   report.offsets, report.seconds, fresh, report.table_partitions or 1)
        write_health(self.state, health)
        problem = self.pace.new_problem()
        if problem:
            self.log(f"WARNING: {problem}")
        self.upkeep.after_batch()
        if self.req.trigger != "processing_time":
            return self._budget(self.req.max_offsets_per_batch), 0.0
        return self._budget(tail_batch_offsets(report.offsets, report.seconds, self.req.trigger_interval_seconds,
                                               self.cfg.tail.min_offsets_per_batch, self.req.max_offsets_per_batch,
                                               cost=health.cost, backlog=health.backlog,
                                               incoming_per_s=health.incoming_per_s,
                                               longest_seconds=longest_batch_seconds(self.req))), 0.0

    def heartbeat(self, caught_up: bool) -> None:
        write_health(self.state, self.pace.heartbeat(caught_up))

    def note(self) -> str:
        return health_note(self.pace.health)

    def warnings(self) -> list[str]:
        return health_warnings(self.pace.health)

    def stopped(self) -> None:
        self.consumer.close()
        self.upkeep.wait()
        mark_stopped(self.state)  # no tail running any more: nothing for a backfill to yield to


class WatchedTailPacer:
    """The tail's pacer as its watcher sees it when the batches are sized elsewhere (on a Spark Connect server,
    by a :class:`TailPacer` there): it beats the published health between batches, and reads it."""

    def __init__(self, pipeline: Pipeline, req: IngestRequest):
        self.req, self.state = req, pipeline.state

    def first_budget(self) -> Budget:
        return Budget(self.req.max_offsets_per_batch)

    def after_batch(self, report: BatchReport) -> tuple[Budget, float]:
        raise NotImplementedError("the tail's batches are sized where they run")

    def heartbeat(self, caught_up: bool) -> None:
        health = read_health(self.state)
        if health is not None:
            write_health(self.state, health.beat(caught_up))

    def note(self) -> str:
        health = read_health(self.state)
        return health_note(health) if health is not None else ""

    def warnings(self) -> list[str]:
        health = read_health(self.state)
        return health_warnings(health) if health is not None else []

    def stopped(self) -> None:
        mark_stopped(self.state)


def health_note(h: TailHealth) -> str:
    """The tail's freshness and backlog, for its progress line."""
    parts = [f"freshness {h.freshness} (objective p95 ≤ {h.freshness_objective_seconds:g}s)"] if h.freshness else []
    if h.backlog is not None:
        parts.append(f"backlog {h.backlog:,} offsets")
    return "; ".join(parts)


def health_warnings(h: TailHealth) -> list[str]:
    problem = h.keep_up_problem()
    return [problem] if problem else []


def watcher_pacer_for(pipeline: Pipeline, req: IngestRequest, cores: int, stopping: threading.Event,
                      log: Callable[[str], None]) -> Pacer:
    """The pacer of a query whose batches run elsewhere, as its watcher uses it: the governor's first budget
    for a bounded request, the tail's published health for an unbounded one."""
    if req.end is None:
        return WatchedTailPacer(pipeline, req)
    return BackfillPacer(pipeline, req, cores, stopping, log)


def pacer_for(pipeline: Pipeline, req: IngestRequest, cores: int, stopping: threading.Event,
              log: Callable[[str], None]) -> Pacer:
    """The tail's pacer for an unbounded request, the governor's for a bounded one."""
    if req.end is None:
        return TailPacer(pipeline, req, log)
    return BackfillPacer(pipeline, req, cores, stopping, log)
