"""What a micro-batch costs: a fixed time, a time per offset and a time per table partition touched, fit from the
batches just measured.

``seconds(n) = fixed + per_offset × n + per_partition × touched(n)``. The fixed part (planning, the commit) is paid
by every batch whatever its size, so a large fixed cost calls for *larger* batches, and a batch's rate
``n / seconds(n)`` grows with its size. On a partitioned table each batch also writes one file per table partition
its records fall in: ``touched(n)`` (:class:`PartitionSpread`) grows with the batch until every partition the
records spread over is touched (a year of days: 365), after which it is one more fixed cost. Pure values and
arithmetic, no I/O, in the manner of Spark's ``KafkaOffsetRangeCalculator``: the pacers (:mod:`tailfill.run.pacing`)
and the backfill's governor feed it their batches and size the next one from it (:mod:`tailfill.run.tuning`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

WINDOW = 8  # the most recent batches a fit uses
MIN_SPREAD = 1.25  # the largest batch of the window at least this times the smallest before a slope is believed
MOST_OFFSETS = 10**12  # no batch is sized beyond this: a cost that still fits there has no limit
MIN_CONDITION = 1e-6  # the smallest singular value of a fit's (scaled) samples, against the largest, to believe it


@dataclass(frozen=True)
class PartitionSpread:
    """How many table partitions a batch touches: records spread evenly over ``distinct`` partitions, a batch of
    ``n`` touches ``distinct × (1 − e^(−n / distinct))`` of them (every one of its ``n`` when ``distinct`` is
    unbounded, ``math.inf``)."""

    distinct: float = 1.0

    def touched(self, offsets: int) -> float:
        """The partitions a batch of ``offsets`` touches, expected."""
        if offsets <= 0:
            return 0.0
        if math.isinf(self.distinct):
            return float(offsets)
        return self.distinct * -math.expm1(-offsets / self.distinct)


def fit_spread(samples: Iterable[tuple[int, int]]) -> PartitionSpread:
    """The spread of records over table partitions from measured ``(offsets, partitions touched)`` batches: the
    median of what each batch says (one partition when none says more)."""
    estimates = sorted(_distinct(n, k) for n, k in samples if n > 0 and k > 0)
    return PartitionSpread(estimates[len(estimates) // 2]) if estimates else PartitionSpread()


def _distinct(offsets: int, touched: int) -> float:
    """The ``distinct`` for which a batch of ``offsets`` touches ``touched`` partitions (by bisection)."""
    if touched >= offsets:
        return math.inf
    if touched <= 1:
        return 1.0
    lo, hi = float(touched), 2.0 * touched
    while PartitionSpread(hi).touched(offsets) < touched:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if PartitionSpread(mid).touched(offsets) < touched else (lo, mid)
    return hi


@dataclass(frozen=True)
class BatchCost:
    """A batch of ``n`` offsets takes ``fixed_seconds + per_offset_seconds × n + per_partition_seconds ×
    spread.touched(n)``."""

    fixed_seconds: float
    per_offset_seconds: float
    per_partition_seconds: float = 0.0  # per table partition touched
    spread: PartitionSpread = PartitionSpread()

    def seconds(self, offsets: int) -> float:
        """How long a batch of ``offsets`` takes."""
        by_partitions = self.per_partition_seconds * self.spread.touched(offsets) if self.per_partition_seconds else 0
        return self.fixed_seconds + self.per_offset_seconds * offsets + by_partitions

    def offsets_within(self, seconds: float) -> int | None:
        """The largest batch that takes at most ``seconds`` (0 if the fixed cost alone is more; None: no limit,
        the cost per offset being nil)."""
        if not self.per_partition_seconds:
            room = seconds - self.fixed_seconds
            if room <= 0:
                return 0
            return None if self.per_offset_seconds <= 0 else int(room / self.per_offset_seconds)
        if self.seconds(1) > seconds:
            return 0
        return _largest(lambda n: self.seconds(n) <= seconds)

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
        if not self.per_partition_seconds:
            if rate * self.per_offset_seconds >= 1:
                return None
            return math.ceil(rate * self.fixed_seconds / (1 - rate * self.per_offset_seconds))
        slow = _largest(lambda n: self.seconds(n) * rate > n, per_interval)  # the largest batch still too slow
        return None if slow is None else slow + 1


def _largest(holds: Callable[[int], bool], start: int = 1) -> int | None:
    """The largest ``n ≥ start`` for which ``holds(n)``, given it holds at ``start`` and from some ``n`` on never again
    (None: it still holds at :data:`MOST_OFFSETS`)."""
    lo, hi = start, 2 * start
    while holds(hi):
        if hi >= MOST_OFFSETS:
            return None
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo


def fit_cost(samples: Iterable[tuple[int, float] | tuple[int, float, int]]) -> BatchCost | None:
    """Least squares over ``(offsets, seconds[, table partitions touched])`` of measured batches, or None while their
    sizes are too alike to tell a fixed cost from a cost per offset. No part is ever negative. The cost per table
    partition is fit when the batches touched different numbers of them in a way their sizes alone do not tell;
    otherwise it is part of the fixed cost (every batch touching the same partitions) or of the cost per offset
    (every record a partition of its own)."""
    points = [(n, t, k) for n, t, k in (_triple(s) for s in samples) if n > 0 and t > 0][-WINDOW:]
    by_partitions = _fit_with_partitions(points)
    return by_partitions if by_partitions is not None else _fit_offsets([(n, t) for n, t, _ in points])


def _triple(sample: tuple) -> tuple[int, float, int]:
    return (sample[0], sample[1], sample[2]) if len(sample) > 2 else (sample[0], sample[1], 1)


def _fit_with_partitions(points: list[tuple[int, float, int]]) -> BatchCost | None:
    """``seconds ~ fixed + per_offset × n + per_partition × k``, when the samples tell the three apart and none is
    negative; else None."""
    if len(points) < 3 or max(k for _, _, k in points) <= 1:
        return None
    design = np.array([[1.0, n, k] for n, _, k in points])
    scale = design.max(axis=0)
    coef, _, rank, singular = np.linalg.lstsq(design / scale, np.array([t for _, t, _ in points]), rcond=None)
    if rank < 3 or singular[-1] < MIN_CONDITION * singular[0] or (coef < 0).any():
        return None
    fixed, per_offset, per_partition = (coef / scale).tolist()
    return BatchCost(fixed, per_offset, per_partition, fit_spread((n, k) for n, _, k in points))


def _fit_offsets(points: list[tuple[int, float]]) -> BatchCost | None:
    """``seconds ~ fixed + per_offset × n`` (None while the sizes are too alike)."""
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

    samples: deque[tuple[int, float, int]] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def add(self, offsets: int, seconds: float, partitions: int = 1) -> BatchCost | None:
        """Record a committed batch (and the table partitions it touched); the cost fit from the window now."""
        if offsets > 0 and seconds > 0:
            self.samples.append((offsets, seconds, partitions))
        return self.cost

    @property
    def cost(self) -> BatchCost | None:
        return fit_cost(self.samples)
