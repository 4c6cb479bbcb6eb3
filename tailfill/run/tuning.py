"""Micro-batch sizing from measured throughput (every commit well inside its deadline).

``max offsets per batch = measured rate × trigger interval × safety factor``, bounded by the
pipeline's configured maximum and a floor. The rate comes from the batch reports of earlier runs
(:mod:`tailfill.state.store`): offsets of each committed batch over the time from its first
task starting to its commit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tailfill.config import PipelineConfig
from tailfill.state.store import StateStore, recent_reports

SAFETY_FACTOR = 0.5
FLOOR = 1_000
TAIL_HEADROOM = 0.6  # a processing-time tail's batch may use this much of its trigger interval
RECENT_RUNS = 5


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
                      "the backfill's configured maximum" + (f"; each batch sized to about {budget:g}s while it runs"
                                                             if budget else ""))
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


def next_batch_offsets(offsets: int, seconds: float, budget_seconds: float, ceiling: int,
                       floor: int = FLOOR) -> int:
    """The next batch's cap, so that it takes about ``budget_seconds`` at the rate the last one ran.

    Within ``[min(floor, ceiling), ceiling]``, and at most four times the last batch (or the floor),
    so that one fast small batch does not size a huge one.
    """
    rate = offsets / seconds if seconds > 0 else float("inf")
    wanted = min(rate * budget_seconds, 4 * max(offsets, floor))
    return int(max(min(floor, ceiling), min(wanted, ceiling)))


def tail_batch_offsets(offsets: int, seconds: float, interval_seconds: float, floor: int, ceiling: int) -> int:
    """A processing-time tail's next cap: what fits in ``TAIL_HEADROOM`` of its trigger interval at the
    rate its last batch ran, within the pipeline's ``[min, max]_offsets_per_batch``. A backlog then
    drains in full-size batches that still end inside their interval."""
    return next_batch_offsets(offsets, seconds, interval_seconds * TAIL_HEADROOM, ceiling, floor)
