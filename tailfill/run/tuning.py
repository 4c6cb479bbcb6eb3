"""Micro-batch sizing from measured throughput (every commit well inside its deadline).

``max offsets per batch = measured rate × trigger interval × safety factor``, bounded by the
pipeline's configured maximum and a floor. The rate comes from the batch reports of earlier runs
(:mod:`tailfill.state.store`): offsets of each committed batch over the time from its first
task starting to its commit.

A backfill lane's batches are also held to a share of the lane's range (:func:`lane_batch_cap`), so that however
small the range, its progress moves in steps. While a query runs, each next batch is sized between batches
(:func:`next_batch_offsets`, :func:`tail_batch_offsets`) from the cost of its recent batches, a fixed time plus a
time per offset (:mod:`tailfill.values.batch_cost`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from tailfill.config import PipelineConfig
from tailfill.run.plan import IngestRequest
from tailfill.state.store import StateStore, recent_reports
from tailfill.values.batch_cost import BatchCost

SAFETY_FACTOR = 0.5
FLOOR = 1_000
TAIL_HEADROOM = 0.6  # a processing-time tail's batch may use this much of its trigger interval
RECENT_RUNS = 5
GROWTH = 4  # a batch is at most this many times the last one (or the floor)
STALL_SHARE = 0.5  # a tail's batch is sized to take at most this share of its stall timeout


@dataclass(frozen=True)
class Tuning:
    max_offsets_per_batch: int
    measured_rows_per_second: float | None
    interval_seconds: float
    configured_max: int
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def measured_rate(store: StateStore) -> float | None:
    """Offsets per second over the committed batches of the most recent runs (their reports in ``store``), or None."""
    done = [b for b in recent_reports(store, RECENT_RUNS) if b.committed and b.seconds > 0]
    seconds = sum(b.seconds for b in done)
    return sum(b.offsets for b in done) / seconds if seconds > 0 else None


def tuned_max_offsets(cfg: PipelineConfig, store: StateStore, mode: str) -> Tuning:
    """The cap for the next ``mode`` run, with the reason, for the run's report (measured from the batch reports
    in ``store``).

    A tail's comes from the measured rate and its trigger interval. A backfill's is its own
    ``backfill.max_offsets_per_batch``: a backfill has no trigger, and sizes each batch while it
    runs (``backfill.batch_seconds``, the governor), so the tail's interval says nothing about it.
    """
    if mode != "tail":
        configured = cfg.backfill.max_offsets_per_batch
        budget = cfg.backfill.batch_seconds
        return Tuning(configured, None, budget or 0.0, configured,
                      f"the backfill's configured maximum, and at most 1/{cfg.backfill.min_batches_per_lane} of "
                      f"a lane's range (at least {FLOOR:,})"
                      + (f"; each batch sized to about {budget:g}s while it runs" if budget else ""))
    configured = cfg.tail.max_offsets_per_batch
    floor = cfg.tail.min_offsets_per_batch
    interval = cfg.tail.trigger_interval_seconds
    rate = measured_rate(store)
    if rate is None:
        return Tuning(configured, None, interval, configured, "no measured batches yet: the configured maximum")
    derived = int(rate * interval * SAFETY_FACTOR)
    value = max(min(derived, configured), floor)
    return Tuning(value, round(rate, 1), interval, configured,
                  f"{rate:,.0f} offsets/s × {interval:g}s × {SAFETY_FACTOR} = {derived:,}, "
                  f"bounded to [{floor:,}, {configured:,}]")


def lane_batch_cap(lane_offsets: int, ceiling: int, steps: int, floor: int = FLOOR) -> int:
    """A backfill lane's batch limit: ``ceiling`` (the configured maximum), and at most 1/``steps`` of the lane's
    ``lane_offsets`` but never under ``floor``, so that a lane runs at least ``steps`` batches (its progress moves
    in steps) unless they would be tiny. A lane of more than ``steps × ceiling`` offsets keeps ``ceiling``."""
    share = math.ceil(lane_offsets / steps)
    return max(min(floor, ceiling), min(share, ceiling))


def next_batch_offsets(offsets: int, seconds: float, budget_seconds: float, ceiling: int,
                       floor: int = FLOOR, cost: BatchCost | None = None) -> int:
    """The next batch's cap, so that it takes about ``budget_seconds``: by ``cost`` (fixed + per offset, fit from
    the recent batches) when it is known, else at the rate the last batch ran. When the fixed cost alone is above
    the budget, batches grow: a smaller one would not be shorter, only slower per offset.

    Within ``[min(floor, ceiling), ceiling]``, and at most four times the last batch (or the floor),
    so that one fast small batch does not size a huge one.
    """
    if cost is not None:
        fits = cost.offsets_within(budget_seconds) or None  # a fixed cost above the budget: no smaller batch helps
    else:
        fits = offsets / seconds * budget_seconds if seconds > 0 else None
    return _bounded(math.inf if fits is None else fits, offsets, floor, ceiling)


def _bounded(wanted: float, last: int, floor: int, ceiling: int) -> int:
    """``wanted`` within ``[min(floor, ceiling), ceiling]``, at most :data:`GROWTH` × the last batch (or the floor)."""
    return int(max(min(floor, ceiling), min(wanted, GROWTH * max(last, floor), ceiling)))


def longest_batch_seconds(req: IngestRequest) -> float | None:
    """The longest a tail's batch may be sized to take: :data:`STALL_SHARE` of its stall timeout (None: none)."""
    return req.stall_timeout_seconds * STALL_SHARE if req.stall_timeout_seconds else None


def tail_batch_offsets(offsets: int, seconds: float, interval_seconds: float, floor: int, ceiling: int,
                       cost: BatchCost | None = None, backlog: int | None = None,
                       incoming_per_s: float | None = None, longest_seconds: float | None = None) -> int:
    """A processing-time tail's next cap, within the pipeline's ``[min, max]_offsets_per_batch``: what fits in
    ``TAIL_HEADROOM`` of its trigger interval, or more when the backlog asks for it.

    To drain ``backlog`` within one interval while ``incoming_per_s`` keeps arriving, the tail must take
    ``incoming + backlog / interval`` offsets/s; by ``cost`` that takes batches of at least
    :meth:`~tailfill.values.batch_cost.BatchCost.offsets_for_rate` (the largest allowed when no size can).
    Without a cost fit yet, the batch grows toward the backlog itself. Growth is at most four times the
    last batch, so the cost is measured again on the way; by the cost, no batch is sized to take longer than
    ``longest_seconds`` (a share of the stall timeout: a batch that long would count as stuck).
    """
    fits = next_batch_offsets(offsets, seconds, interval_seconds * TAIL_HEADROOM, ceiling, floor, cost)
    backlog, incoming = backlog or 0, incoming_per_s or 0.0
    rate = incoming + backlog / interval_seconds
    if cost is None:
        drains: float = backlog + incoming * interval_seconds
    else:
        drains = math.inf if (n := cost.offsets_for_rate(rate, interval_seconds)) is None else n
    wanted = max(fits, _bounded(drains, offsets, floor, ceiling))
    if cost is None or longest_seconds is None or (most := cost.offsets_within(longest_seconds)) is None:
        return wanted
    return max(min(wanted, most), min(floor, ceiling))
