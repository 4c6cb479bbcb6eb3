"""What a micro-batch costs: a fixed time plus a time per offset, fit from the batches just measured.

``seconds(n) = fixed + per_offset × n``. The fixed part (planning, one file per table partition touched,
the commit) is paid by every batch whatever its size, so a large fixed cost calls for *larger* batches,
and a batch's rate ``n / seconds(n)`` grows with its size. Pure values and arithmetic, no I/O, in the
manner of Spark's ``KafkaOffsetRangeCalculator``: the pacers (:mod:`tailfill.run.pacing`) and the
backfill's governor feed it their batches and size the next one from it (:mod:`tailfill.run.tuning`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

WINDOW = 8  # the most recent batches a fit uses
MIN_SPREAD = 1.25  # the largest batch of the window at least this times the smallest before a slope is believed


@dataclass(frozen=True)
class BatchCost:
    """A batch of ``n`` offsets takes ``fixed_seconds + per_offset_seconds × n``."""

    fixed_seconds: float
    per_offset_seconds: float

    def seconds(self, offsets: int) -> float:
        """How long a batch of ``offsets`` takes."""
        return self.fixed_seconds + self.per_offset_seconds * offsets

    def offsets_within(self, seconds: float) -> int | None:
        """The largest batch that takes at most ``seconds`` (0 if the fixed cost alone is more; None: no limit,
        the cost per offset being nil)."""
        room = seconds - self.fixed_seconds
        if room <= 0:
            return 0
        return None if self.per_offset_seconds <= 0 else int(room / self.per_offset_seconds)

    def rate(self, offsets: int, interval_seconds: float) -> float:
        """Offsets/s taken by batches of ``offsets`` started every ``interval_seconds`` (back to back when a batch
        takes longer)."""
        return offsets / max(interval_seconds, self.seconds(offsets))

    def offsets_for_rate(self, rate: float, interval_seconds: float) -> int | None:
        """The smallest batch that takes ``rate`` offsets/s with a trigger every ``interval_seconds``, or None
        when no batch size can (each offset alone costs more than ``1 / rate``)."""
        per_interval = math.ceil(rate * interval_seconds)
        if self.seconds(per_interval) <= interval_seconds:
            return per_interval
        if rate * self.per_offset_seconds >= 1:
            return None
        return math.ceil(rate * self.fixed_seconds / (1 - rate * self.per_offset_seconds))


def fit_cost(samples: Iterable[tuple[int, float]]) -> BatchCost | None:
    """Least squares over ``(offsets, seconds)`` of measured batches, or None while their sizes are too alike
    to tell a fixed cost from a cost per offset. Neither part is ever negative."""
    points = [(n, t) for n, t in samples if n > 0 and t > 0][-WINDOW:]
    if len(points) < 2 or max(n for n, _ in points) < MIN_SPREAD * min(n for n, _ in points):
        return None
    mean_n = sum(n for n, _ in points) / len(points)
    mean_t = sum(t for _, t in points) / len(points)
    var = sum((n - mean_n) ** 2 for n, _ in points)
    slope = max(sum((n - mean_n) * (t - mean_t) for n, t in points) / var, 0.0)
    fixed = mean_t - slope * mean_n
    if fixed < 0:  # through the origin: all of it per offset
        return BatchCost(0.0, sum(n * t for n, t in points) / sum(n * n for n, _ in points))
    return BatchCost(fixed, slope)


@dataclass
class CostWindow:
    """The most recent batches of one query, and the cost fit from them."""

    samples: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def add(self, offsets: int, seconds: float) -> BatchCost | None:
        """Record a committed batch; the cost fit from the window now."""
        if offsets > 0 and seconds > 0:
            self.samples.append((offsets, seconds))
        return self.cost

    @property
    def cost(self) -> BatchCost | None:
        return fit_cost(self.samples)
