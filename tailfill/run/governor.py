"""The backfill yields to the tail: a rate limit, lighter batches beside a live tail,
and a pause while the tail is behind its freshness objective
(:func:`~tailfill.state.tail_verdict.tail_verdict`, the verdict ``status`` shows).

Called between a backfill query's batches (after a commit, before the next batch is planned), so
a pause never leaves anything half done. It decides the next batch's budget: how many offsets and
how many tasks (cores). The tail's side is :mod:`tailfill.run.tail_health`.

The governor is never blind in silence: when it cannot see the tail (no tail state under the
pipeline's state root, or the state cannot be read) its state line says so and it follows
``backfill.when_tail_unknown``: ``yield`` (short batches on half the cores, as beside a live tail)
or ``proceed`` (full speed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

from tailfill.run.tuning import next_batch_offsets
from tailfill.source.handoff import Budget
from tailfill.state.records import TailHealth
from tailfill.state.tail_verdict import tail_verdict
from tailfill.values.batch_cost import CostWindow

PAUSE_LOG_EVERY_S = 30.0
MAX_PAUSE_INTERVALS = 10  # a tail still late after this many of its intervals is not late because of us


class Governor:
    """Between-batch decisions of one backfill query."""

    def __init__(self, *, max_offsets_per_batch: int, batch_seconds: float | None, max_offsets_per_second: int | None,
                 cores: int, read_tail: Callable[[], tuple[TailHealth | None, str | None]],
                 when_tail_unknown: Literal["yield", "proceed"], tail_interval_seconds: float,
                 log: Callable[[str], None], stopping: threading.Event | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep):
        """``read_tail``: the tail's health, or None and why it is unknown (:mod:`tailfill.run.tail_health`)."""
        self.ceiling, self.batch_seconds, self.rate_limit = max_offsets_per_batch, batch_seconds, max_offsets_per_second
        self.cores, self.read_tail, self.log = cores, read_tail, log
        self.when_tail_unknown, self.tail_interval = when_tail_unknown, tail_interval_seconds
        self._unknown: str | None = None  # why the tail was unknown at the last look (logged once per change)
        self.stopping = stopping or threading.Event()
        self.clock, self.sleep = clock, sleep
        self.started = clock()
        self.offsets = 0
        self.costs = CostWindow()  # this query's recent batches: what a batch costs
        self.state = "full speed"

    def first_budget(self) -> Budget:
        """The first batch's budget: yield from the start if a tail is already running."""
        return self._budget(None, None)

    def after_batch(self, offsets: int, seconds: float, partitions: int = 1) -> tuple[Budget, float]:
        """The next batch's budget, after waiting as the rate limit and the tail require.

        ``offsets`` and ``seconds``: the batch just committed and how long it took (``partitions``: the table
        partitions it touched). Returns the budget and the seconds spent waiting.
        """
        self.offsets += offsets
        self.costs.add(offsets, seconds, partitions)
        waited = self._rate_limit_wait() + self._pause_while_tail_suffers()
        return self._budget(offsets, seconds), waited

    def _rate_limit_wait(self) -> float:
        if self.rate_limit is None:
            return 0.0
        due = self.started + self.offsets / self.rate_limit  # when this many offsets are allowed
        if due <= self.clock():
            return 0.0
        self.state = f"rate-limited to {self.rate_limit:,}/s"
        began = self.clock()
        while not self.stopping.is_set() and (left := due - self.clock()) > 0:
            self.sleep(min(left, 1.0))  # in steps: a query being stopped does not wait out the limit
        return self.clock() - began

    def _pause_while_tail_suffers(self) -> float:
        began = last_log = self.clock()
        paused = False
        while not self.stopping.is_set():
            health = self._look()
            verdict = tail_verdict(health) if health is not None and health.live(self.clock()) else None
            if verdict is None or not verdict.behind:
                break
            why = "; ".join(verdict.reasons)
            if self.clock() - began >= MAX_PAUSE_INTERVALS * health.trigger_interval_seconds:
                self.log(f"the tail is still late after {self.clock() - began:.0f}s paused ({why}): the backfill "
                         "is not what holds it back (see the tail's keep-up line and the broker); one more batch")
                return self.clock() - began
            self.state = f"paused for the tail ({why})"
            if not paused or self.clock() - last_log >= PAUSE_LOG_EVERY_S:
                self.log(f"yielding to the tail: {why}; backfill paused between batches")
                paused, last_log = True, self.clock()
            self.sleep(1.0)
        waited = self.clock() - began
        if paused:
            self.log(f"tail healthy again: backfill resumes after {waited:.0f}s paused")
        return waited

    def _look(self) -> TailHealth | None:
        """The tail's health; when it is unknown, say why (once per change of reason) and return None."""
        health, why = self.read_tail()
        if why != self._unknown and why is not None:
            act = ("yielding as if beside a live tail" if self.when_tail_unknown == "yield"
                   else "proceeding at full speed")
            self.log(f"tail state unknown: {why}; {act} (backfill.when_tail_unknown: {self.when_tail_unknown})")
        elif why is None and self._unknown is not None:
            self.log("tail state readable again")
        self._unknown = why
        return health

    def _budget(self, offsets: int | None, seconds: float | None) -> Budget:
        health = self._look()
        unknown_yield = self._unknown is not None and self.when_tail_unknown == "yield"
        beside_tail = unknown_yield or (health is not None and health.live(self.clock()))
        interval = health.trigger_interval_seconds if health is not None else self.tail_interval
        budget_s = self.batch_seconds
        tasks = None
        if beside_tail:
            # Short batches on half the cores: the tail always finds a core and never waits long.
            budget_s = min(budget_s or interval, interval / 2)
            tasks = max(1, self.cores // 2)
        cap = self.ceiling
        if offsets is not None and seconds and budget_s is not None:
            cap = next_batch_offsets(offsets, seconds, budget_s, self.ceiling, cost=self.costs.cost)
        elif beside_tail:
            cap = min(self.ceiling, 100_000)  # no rate measured yet: start small beside a tail
        if self.rate_limit is not None:
            cap = min(cap, max(1, int(self.rate_limit * (budget_s or 10.0))))
        if unknown_yield:
            self.state = f"tail state unknown, yielding: {tasks} of {self.cores} cores, ~{budget_s:g}s batches"
        elif beside_tail:
            self.state = f"beside the live tail: {tasks} of {self.cores} cores, ~{budget_s:g}s batches"
        elif self.rate_limit is not None:
            self.state = f"rate-limited to {self.rate_limit:,}/s"
        else:
            self.state = "full speed"
        if self._unknown is not None and not unknown_yield:
            self.state = f"tail state unknown, proceeding: {self.state}"
        return Budget(cap, tasks)
